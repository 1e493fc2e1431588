"""Training a token-pruned ViT: distillation (SaiT, AS-ViT) and AS-ViT's
budget-aware loss, on top of mmpretrain's ``ImageClassifier``."""
import contextlib
from collections import OrderedDict

import torch
from mmpretrain.models.classifiers import ImageClassifier

from mmvitaccel.registry import MODELS
from mmvitaccel.models.token_pruning.token_pruned_vit import (
                                                              TokenPrunedVisionTransformer,
                                                              tokens_and_last_attention)
from mmvitaccel.models.distill import (TeacherMixin, check_temperature,
                                       kl_divergence)
from mmvitaccel.models.utils.checkpoint import dino_state_dict, is_official_vit
from mmvitaccel.models.utils.vit import format_vit_output

#: :meth:`TokenPrunedVisionTransformer.set_pruning` keys in ``test_cfg``
TEST_SETTINGS = ('density', 'mass_threshold', 'prune', 'batch_mode',
                 'test_execution')


def teacher_state_dict(state_dict):
    """Teacher checkpoint converter: mmpretrain's as is, timm-layout ViTs
    (official DeiT, DINO) to ``backbone.*`` names (no head) by
    :func:`~mmvitaccel.models.utils.checkpoint.dino_state_dict`.

    Args:
        state_dict (dict): as read from the teacher's checkpoint.

    Returns:
        dict: weights in the teacher classifier's names.
    """
    if not is_official_vit(state_dict):
        return state_dict
    return OrderedDict(('backbone.' + k, v)
                       for k, v in dino_state_dict(state_dict).items())


@MODELS.register_module()
class TokenPrunedClassifier(TeacherMixin, ImageClassifier):
    """An ``ImageClassifier`` with a :class:`TokenPrunedVisionTransformer`,
    the losses of SaiT and AS-ViT and test-time pruning settings.

    Losses added to the head's:

    * ``loss_distill = lambda2 * KL(p_teacher || p_student)`` on the logits;
    * ``loss_token_distill = lambda2 * mean_{kept i} KL(softmax(t_i) ||
      softmax(s_i))`` over the channels of the final kept tokens;
    * ``loss_tis = beta * KL(a_teacher || TIS)`` at the first pruning
      location, ``a_teacher`` by :meth:`tis_target`;
    * ``loss_budget = lambda1 * |mean_b FLOPs(x_b) / FLOPs_dense - t|``,
      FLOPs analytic in the (straight-through) token counts.

    Args:
        backbone (dict): a :class:`TokenPrunedVisionTransformer` config.
        teacher (dict, optional): ``dict(config=..., checkpoint=...)``
            (:func:`~mmvitaccel.models.distill.build_teacher`); one without
            a head (SaiT's DINO) needs ``distill_weight=0``.
        distill_weight (float): ``lambda2`` of the logit KL (AS-ViT 0.5).
        token_distill_weight (float): weight of the kept-token KL (0 for
            DeiT, as in AS-ViT).
        distill_temperature (float): softmax temperature of the logit KL.
        tis_distill_weight (float): ``beta`` of the TIS KL (SaiT 4; 0: off).
        budget (float, optional): ``t``, the target FLOPs ratio (``None``:
            no budget loss).
        budget_weight (float): ``lambda1`` (AS-ViT 2).
        test_cfg (dict, optional): pruning settings for prediction, e.g.
            ``dict(density=0.7)``; keys from :data:`TEST_SETTINGS`.
        **kwargs: ``ImageClassifier``'s other arguments.
    """
    def __init__(self,
                 backbone,
                 teacher=None,
                 distill_weight=0.5,
                 token_distill_weight=0.,
                 distill_temperature=1.,
                 tis_distill_weight=0.,
                 budget=None,
                 budget_weight=2.,
                 test_cfg=None,
                 **kwargs):
        super().__init__(backbone=backbone, **kwargs)
        if not isinstance(self.backbone, TokenPrunedVisionTransformer):
            raise ValueError('TokenPrunedClassifier needs a '
                             'TokenPrunedVisionTransformer backbone, got '
                             f'{type(self.backbone).__name__}')
        if budget is not None and not 0. < budget <= 1.:
            raise ValueError(f'budget must be in (0, 1], got {budget}')
        if budget is not None and self.backbone.selector != 'threshold':
            raise ValueError('the budget loss trains learnable thresholds: '
                             "use selector='threshold'")
        needs_teacher = tis_distill_weight > 0 or token_distill_weight > 0
        if needs_teacher and teacher is None:
            raise ValueError('token and TIS distillation need a teacher')
        self.test_cfg = dict(test_cfg or {})
        self._check_settings(self.test_cfg)
        if teacher is not None:
            self.add_teacher('teacher', teacher, converter=teacher_state_dict)
            if distill_weight > 0 and not self._teacher_has_head():
                raise ValueError(
                    f'distill_weight={distill_weight} distils the teacher\'s '
                    f'logits, but the teacher '
                    f'({type(self.teacher).__name__}) has no classification '
                    f'head (e.g. DINO, whose distillation is the TIS loss '
                    f'alone): set distill_weight=0, or give a teacher with a '
                    f'head')
        if token_distill_weight > 0:
            width = getattr(self.teacher.backbone, 'embed_dims', None)
            if width != self.backbone.embed_dims:
                raise ValueError(
                    f'the kept-token KL compares features: the teacher\'s '
                    f'width {width} must equal the student\'s '
                    f'{self.backbone.embed_dims}')
        self.distill_weight = distill_weight
        self.token_distill_weight = token_distill_weight
        self.distill_temperature = check_temperature('distill_temperature',
                                                     distill_temperature)
        self.tis_distill_weight = tis_distill_weight
        self.budget = budget
        self.budget_weight = budget_weight
        self.backbone.always_score = tis_distill_weight > 0

    def _teacher_has_head(self):
        return getattr(self.teacher, 'with_head', False)

    @staticmethod
    def _check_settings(settings):
        unknown = set(settings) - set(TEST_SETTINGS)
        if unknown:
            raise ValueError(f'unknown test_cfg keys {sorted(unknown)}; '
                             f'choose from {TEST_SETTINGS}')

    def set_test_cfg(self, **settings):
        """Update the pruning settings used by :meth:`predict`."""
        self._check_settings(settings)
        self.test_cfg.update(settings)

    @contextlib.contextmanager
    def _test_settings(self):
        """Apply ``test_cfg`` to the backbone, restoring it afterwards."""
        bb = self.backbone
        saved = dict(density=bb.density, mass_threshold=bb.mass_threshold,
                     prune=bb.prune, batch_mode=bb.batch_mode,
                     test_execution=bb.test_execution)
        bb.set_pruning(**self.test_cfg)
        try:
            yield
        finally:
            bb.set_pruning(**saved)

    def predict(self, inputs, data_samples=None, **kwargs):
        """Predict with the ``test_cfg`` pruning settings."""
        with self._test_settings():
            return super().predict(inputs, data_samples, **kwargs)

    def _teacher_outputs(self, inputs):
        """Teacher logits (None without a head), tokens, attention; no grad."""
        teacher = self.teacher
        logits = None
        with torch.no_grad():
            tokens, attn, hw = tokens_and_last_attention(
                teacher.backbone, inputs)
            if self._teacher_has_head():
                # the teacher's own readout (class token, averaged patches)
                feats = (format_vit_output(teacher.backbone, tokens, hw), )
                if teacher.with_neck:
                    feats = teacher.neck(feats)
                logits = teacher.head(feats)
        return logits, tokens, attn

    @staticmethod
    def tis_target(attn):
        """SaiT's TIS target: the teacher's last-layer class attention,
        head-averaged, renormalised over the patches.

        Args:
            attn (Tensor): ``(B, heads, 1 + N, 1 + N)``.

        Returns:
            Tensor: ``(B, N)``, rows summing to 1.
        """
        target = attn[:, :, 0, 1:].mean(dim=1)
        return target / target.sum(dim=-1, keepdim=True)

    def loss(self, inputs, data_samples):
        """Head loss plus the distillation and budget losses.

        Args:
            inputs (Tensor): ``(B, 3, H, W)``.
            data_samples (list[DataSample]): the labels.

        Returns:
            dict[str, Tensor]: the losses.
        """
        feats = self.extract_feat(inputs)
        losses = self.head.loss(feats, data_samples)
        bb = self.backbone
        if self.teacher is not None:
            t_logits, t_tokens, t_attn = self._teacher_outputs(inputs)
            if self.distill_weight > 0 and t_logits is not None:
                logits = self.head(feats)
                losses['loss_distill'] = self.distill_weight * kl_divergence(
                    logits, t_logits, self.distill_temperature).mean()
            if self.token_distill_weight > 0:
                losses['loss_token_distill'] = self.token_distill_weight * \
                    self._token_kl(bb, t_tokens)
            if self.tis_distill_weight > 0 and bb.scores:
                target = self.tis_target(t_attn)
                student = bb.scores[0].clamp_min(1e-8).log()
                if student.shape != target.shape:
                    raise ValueError(
                        f'TIS distillation needs the teacher on the same '
                        f'patch grid: student {tuple(student.shape)}, '
                        f'teacher {tuple(target.shape)}')
                kl = (target * (target.clamp_min(1e-8).log() - student))
                losses['loss_tis'] = self.tis_distill_weight * kl.sum(
                    -1).mean()
        if self.budget is not None:
            flops = bb.analytic_flops()
            # layer 0 sees every token: a host-side count, no device read
            dense = bb.dense_flops(float(bb.num_extra_tokens +
                                         bb._num_patches))
            losses['loss_budget'] = self.budget_weight * (
                flops.mean() / dense - self.budget).abs()
        return losses

    @staticmethod
    def _token_kl(backbone, teacher_tokens):
        """Channel KL of the final kept tokens to the teacher's, averaged.

        Args:
            backbone (TokenPrunedVisionTransformer): after its forward.
            teacher_tokens (Tensor): ``(B, 1 + N, C)``.
        """
        student = backbone.final_tokens[:, 1:]
        index = backbone.final_index  # (B, K): masked, dropped or padded
        teacher = teacher_tokens[:, 1:].gather(
            1, index[..., None].expand(-1, -1, teacher_tokens.shape[-1]))
        kl = kl_divergence(student, teacher)
        w = backbone.final_alive.to(kl.dtype)
        return (kl * w).sum() / w.sum().clamp_min(1.)
