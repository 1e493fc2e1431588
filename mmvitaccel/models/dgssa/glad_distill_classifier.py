"""GLAD token distillation (Integrated-DeiT training):
``loss_glad = distill_weight * sum_l MSE(Y_l, GLAD_t,l(X_t,l))``, and with a
``teacher_head`` ``loss_kd = kd_weight * mean_b KL(p_t || p_s)``."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmpretrain.models.classifiers import ImageClassifier

from mmvitaccel.ops import GLAD
from mmvitaccel.registry import MODELS
from mmvitaccel.models.dgssa.dgssa_vit import DGSSAVisionTransformer
from mmvitaccel.models.distill import TeacherMixin, kl_divergence
from mmvitaccel.models.utils import deit_state_dict
from mmvitaccel.models.utils.vit import (embed_tokens, format_vit_output,
                                         run_layers)


@MODELS.register_module()
class GLADDistillClassifier(TeacherMixin, ImageClassifier):
    """mmpretrain's ``ImageClassifier`` with GLAD token distillation.

    Args:
        backbone (dict): a :class:`DGSSAVisionTransformer` config.
        teacher (dict, optional): the pretrained ``VisionTransformer``
            config (same width and grid); frozen, outside the state dict.
            None: no distillation.
        teacher_checkpoint (str, optional): its weights, loaded in
            ``init_weights`` (overrides its ``init_cfg``).
        distill_weight (float): weight of ``L_glad``.
        glad_init (str): ``W`` init of the teacher-side GLADs.
        teacher_head (dict, optional): the teacher's head; enables
            ``loss_kd``.
        kd_weight (float): weight of ``loss_kd``.
        **kwargs: the arguments of ``ImageClassifier``.
    """

    teacher_names = ('teacher', 'teacher_head')
    distill_only = ('teacher_glads', )

    def __init__(self,
                 backbone,
                 teacher=None,
                 teacher_checkpoint=None,
                 distill_weight=1.0,
                 glad_init='pool',
                 teacher_head=None,
                 kd_weight=1.0,
                 **kwargs):
        super().__init__(backbone=backbone, **kwargs)
        if not isinstance(self.backbone, DGSSAVisionTransformer):
            raise ValueError('GLADDistillClassifier needs a '
                             'DGSSAVisionTransformer backbone, got '
                             f'{type(self.backbone).__name__}')
        self.distill_weight = distill_weight
        self.teacher_checkpoint = teacher_checkpoint
        self.kd_weight = kd_weight
        self.teacher_glads = None
        self.teacher_load_report = None
        if teacher is None:
            if teacher_head is not None:
                raise ValueError('teacher_head needs a teacher')
            return
        vit = self.add_teacher('teacher', teacher, teacher_checkpoint,
                               converter=deit_state_dict)
        student = self.backbone
        if vit.embed_dims != student.embed_dims or tuple(
                vit.patch_resolution) != tuple(student.patch_resolution):
            raise ValueError(
                f'the teacher ({vit.embed_dims} channels, patch '
                f'grid {vit.patch_resolution}) must match the '
                f'student ({student.embed_dims}, '
                f'{student.patch_resolution})')
        if vit.num_extra_tokens != student.num_extra_tokens:
            raise ValueError('teacher and student must have the same class '
                             'tokens')
        if student.glad_layers and \
                max(student.glad_layers) >= vit.num_layers:
            raise ValueError('the teacher has no layer at the last GLAD '
                             'layer of the student')
        e = student.num_extra_tokens
        self.teacher_glads = nn.ModuleList(
            GLAD(student.tokens[0] - e, m - e, student.embed_dims, glad_init)
            for m in student.glad_tokens)
        if teacher_head is not None:
            self.add_teacher('teacher_head', teacher_head)

    @property
    def teacher_head(self):
        """The teacher's frozen classification head, or None."""
        return self.get_teacher('teacher_head')

    def init_weights(self):
        """Initialise, load the teacher, reset the teacher-side GLADs."""
        super().init_weights()
        self.teacher_load_report = self.teacher_load_reports.get('teacher')
        if self.teacher_glads is not None:
            for glad in self.teacher_glads:
                glad.reset_parameters()

    @torch.no_grad()
    def teacher_forward(self, inputs):
        """The teacher's tokens at each GLAD layer's input, and its logits.

        Args:
            inputs (Tensor): images ``(B, 3, H, W)``.

        Returns:
            tuple[list[Tensor], Tensor | None]: ``(B, N, d)`` per GLAD layer;
            the logits ``(B, classes)`` or None.
        """
        t = self.teacher
        x, hw = embed_tokens(t, inputs)
        layers = self.backbone.glad_layers
        tokens = {}

        def record(i, layer, x):  # the input of layer i
            if i in layers:
                tokens[i] = x
            return layer(x)

        # with a head run every layer, else stop at the last GLAD's input
        stop = None if self.teacher_head is not None else max(layers,
                                                              default=0)
        _, x = run_layers(t, x, hw, step=record, stop=stop, outputs=False)
        logits = None
        if self.teacher_head is None:
            tokens[stop] = x
        else:
            logits = self.teacher_head((format_vit_output(t, x, hw), ))
        return [tokens[i] for i in layers], logits

    def glad_loss(self, tokens, glad_outputs):
        """``sum_l MSE(Y_l, GLAD_t,l(X_t,l))`` over the GLAD layers.

        Args:
            tokens (list[Tensor]): the teacher's ``X_t,l`` ``(B, N, d)``.
            glad_outputs (list[Tensor]): the student's ``Y_l``
                ``(B, m_l - 1, d)``.

        Returns:
            Tensor: the loss (scalar).
        """
        e = self.backbone.num_extra_tokens
        return sum(
            F.mse_loss(y, glad(x[:, e:]))
            for y, glad, x in zip(glad_outputs, self.teacher_glads, tokens))

    def loss(self, inputs, data_samples):
        """Task loss of the head, plus ``loss_glad`` with a teacher.

        Args:
            inputs (Tensor): images ``(B, 3, H, W)``.
            data_samples (list[DataSample]): the annotations.

        Returns:
            dict[str, Tensor]: the losses.
        """
        feats, glad_outputs = self.backbone.forward_with_glad(inputs)
        if self.with_neck:
            feats = self.neck(feats)
        if self.teacher is None:
            return self.head.loss(feats, data_samples)
        scores = self.head(feats)
        losses = self.head._get_loss(scores, data_samples)
        tokens, logits = self.teacher_forward(inputs)
        if glad_outputs:
            losses['loss_glad'] = self.distill_weight * self.glad_loss(
                tokens, glad_outputs)
        if logits is not None:
            losses['loss_kd'] = self.kd_weight * kl_divergence(
                scores, logits).mean()
        return losses
