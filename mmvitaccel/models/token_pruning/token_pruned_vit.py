"""Token-pruned ViT/DeiT: SaiT (Li et al., 2022) and AS-ViT (Liu et al.,
IJCAI 2023) in one backbone (``docs/token_pruning_design.md``)."""
from numbers import Real

import torch
import torch.nn as nn
from mmpretrain.models.backbones import VisionTransformer

from mmvitaccel.ops import (BATCH_MODES, MASK_MODES, POLICY_GRADS, SCORERS,
                            SELECTORS, asvit_score, check_choice,
                            cls_attention_score, mass_keep_mask, random_score,
                            threshold_keep_mask, tis_score, topk_keep_mask,
                            value_keep_counts)
from mmvitaccel.ops.tome import merge_dropped
from mmvitaccel.registry import MODELS
from mmvitaccel.models.token_pruning.token_pruning_layer import (PrunedTokens,
                                                                 PruningState,
                                                                 layer_forward,
                                                                 tokens_and_last_attention)
from mmvitaccel.models.utils import as_int_tuple, check_finite
from mmvitaccel.models.utils.vit import (FrozenStagesMixin, embed_tokens,
                                         run_layers)
from mmvitaccel.models.utils.archs import DEIT_ARCHS
from mmvitaccel.models.token_pruning.token_pruned_vit_records import (
                                                                      PruningRecordsMixin)

__all__ = [
    'TokenPrunedVisionTransformer', 'tokens_and_last_attention',
    'PrunedTokens', 'layer_forward', 'EXECUTIONS'
]

EXECUTIONS = ('mask', 'drop')


@MODELS.register_module()
class TokenPrunedVisionTransformer(FrozenStagesMixin, VisionTransformer,
                                   PruningRecordsMixin):
    """A ViT/DeiT whose later layers run on the informative tokens only.

    Before each layer ``l`` in ``prune_before`` the attention of layer
    ``l - 1`` scores the patch tokens, ``S (B, N)``, and ``selector`` keeps
    some: ``'value'`` the top ``round(rho (N + 1)) - 1``, ``'mass'`` the
    fewest reaching ``M_th`` of the score, ``'threshold'`` ``S > theta``
    (``sigmoid((S - theta) / tau)``, straight-through, in training).
    ``'mask'`` execution masks pruned keys out of later softmaxes,
    ``'drop'`` gathers the kept tokens. Not pruning equals mmpretrain's
    ``VisionTransformer`` exactly.

    After a forward: :attr:`keep_masks` (per location, ``(B, N)`` bool),
    :attr:`scores` ``(B, N)``, :attr:`token_counts` ``(B, num_layers)``,
    :attr:`final_tokens` ``(B, T', C)``, :attr:`final_index` and
    :attr:`final_alive` ``(B, T' - 1)``.

    Args:
        arch (str | dict): ``'deit-tiny'``/``'deit-small'``/``'deit-base'``
            (``'tiny'`` etc. read as DeiT) or a ``VisionTransformer`` arch.
        prune_before (int | Sequence[int]): increasing 0-based layers in
            ``1 .. num_layers - 1``; SaiT-S ``(3, )``, AS-ViT ``(4, 7, 10)``.
        scorer (str): ``'tis'``, ``'asvit'``, ``'cls'`` or ``'random'``.
        selector (str): ``'value'``, ``'mass'`` or ``'threshold'``.
        density (float): ``rho`` of the value selector, in ``(0, 1]``.
        mass_threshold (float): ``M_th`` of the mass selector, in ``(0, 1]``.
        thresholds (float | Sequence[float]): initial learnable ``theta`` per
            location, finite; AS-ViT: 0.001, 0.002, 0.003.
        tau (float): the sigmoid temperature of the threshold selector.
        mask_mode (str): ``'logits'`` (SaiT) or ``'policy'`` (AS-ViT).
        policy_grad (str): ``'secant'`` (bounded) or ``'tangent'`` (the
            paper's); see :func:`~mmvitaccel.ops.masked_attention`.
        train_execution (str): ``'mask'`` or ``'drop'`` (refused with the
            threshold selector).
        test_execution (str): ``'mask'`` or ``'drop'`` in eval mode.
        batch_mode (str): ``'pad'`` (exact) or ``'mean'`` (AS-ViT's).
        prune (bool): whether to prune at all.
        out_type (str): ``'cls_token'``, ``'avg_featmap'``, ``'featmap'``
            (restored ``(B, C, H, W)``), ``'raw'`` or ``'tokens'``
            (:class:`PrunedTokens`).
        fused_scoring (bool): compute only the class row for
            :attr:`CLS_ROW_SCORERS` (the same scores).
        merge_pruned (bool): prune and merge: a dropped token joins its
            most similar kept token, size-weighted
            (:func:`~mmvitaccel.ops.tome.merge_dropped`), instead of being
            discarded; ``'drop'`` execution in training and test,
            ``batch_mode='pad'``.
        **kwargs: the other arguments of ``VisionTransformer``.
    """
    OUT_TYPES = {'cls_token', 'avg_featmap', 'featmap', 'raw', 'tokens'}

    def __init__(self,
                 arch='deit-small',
                 prune_before=(3, ),
                 scorer='tis',
                 selector='mass',
                 density=0.5,
                 mass_threshold=0.7,
                 thresholds=(0.001, 0.002, 0.003),
                 tau=1e-4,
                 mask_mode='logits',
                 policy_grad='secant',
                 train_execution='mask',
                 test_execution='drop',
                 batch_mode='pad',
                 prune=True,
                 out_type='cls_token',
                 fused_scoring=True,
                 merge_pruned=False,
                 **kwargs):
        if isinstance(arch, str):
            arch = DEIT_ARCHS.get(arch.lower(), arch.lower())
        check_choice('scorer', scorer, SCORERS)
        check_choice('selector', selector, SELECTORS)
        check_choice('mask_mode', mask_mode, MASK_MODES)
        check_choice('policy_grad', policy_grad, POLICY_GRADS)
        check_choice('train_execution', train_execution, EXECUTIONS)
        check_choice('test_execution', test_execution, EXECUTIONS)
        check_choice('batch_mode', batch_mode, BATCH_MODES)
        check_choice('out_type', out_type, sorted(self.OUT_TYPES))
        if selector == 'threshold' and train_execution == 'drop':
            raise ValueError(
                "the threshold selector learns through its soft mask; "
                "train it with train_execution='mask'")
        if not isinstance(merge_pruned, bool):
            raise ValueError(f'merge_pruned must be True or False, got '
                             f'{merge_pruned!r}')
        if merge_pruned and (train_execution, test_execution,
                             batch_mode) != ('drop', 'drop', 'pad'):
            raise ValueError(
                "merge_pruned merges the tokens it drops: it needs "
                "train_execution='drop', test_execution='drop' and "
                f"batch_mode='pad', got {train_execution!r}, "
                f"{test_execution!r}, {batch_mode!r}")
        if kwargs.get('with_cls_token', True) is False:
            raise ValueError('token pruning scores with the class token; '
                             'with_cls_token=False is not supported')
        super().__init__(arch=arch, out_type=out_type, **kwargs)
        prune_before = as_int_tuple('prune_before', prune_before)
        if not prune_before or list(prune_before) != sorted(
                set(prune_before)) or not all(
                    1 <= i < self.num_layers for i in prune_before):
            raise ValueError(
                f'prune_before must be increasing layer indices in '
                f'1..{self.num_layers - 1}, got {prune_before}')
        self.prune_before = prune_before
        self.scorer = scorer
        self.selector = selector
        self.mask_mode = mask_mode
        self.policy_grad = policy_grad
        self.train_execution = train_execution
        self.test_execution = test_execution
        self.batch_mode = batch_mode
        self.prune = prune
        self.tau = tau
        if not isinstance(fused_scoring, bool):
            raise ValueError(f'fused_scoring must be True or False, got '
                             f'{fused_scoring!r}')
        self.fused_scoring = fused_scoring
        self.merge_pruned = merge_pruned
        #: score even when not pruning (TIS distillation in dense epochs)
        self.always_score = False
        if selector == 'threshold':
            if isinstance(thresholds, Real):
                thresholds = (thresholds, )
            thresholds = check_finite('thresholds', thresholds)
            if len(thresholds) != len(prune_before):
                raise ValueError(
                    f'one threshold per pruning location: {len(prune_before)}'
                    f' locations {prune_before}, {len(thresholds)} '
                    f'thresholds {thresholds}')
            self.thresholds = nn.Parameter(torch.tensor(thresholds))
        else:
            self.thresholds = None
        self.density = 1.0
        self.mass_threshold = 1.0
        self.set_pruning(density=density, mass_threshold=mass_threshold,
                         tau=tau)
        self._clear_records()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        """Refuse non-finite thresholds before loading."""
        key = prefix + 'thresholds'
        if self.thresholds is not None and key in state_dict:
            check_finite(f'thresholds (state dict key {key!r})',
                         state_dict[key])
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # --- settings ---------------------------------------------------------

    def set_pruning(self, density=None, mass_threshold=None, prune=None,
                    batch_mode=None, tau=None, test_execution=None):
        """Change the pruning settings (``None`` leaves one as it is).

        Args:
            density (float, optional): ``rho`` of the value selector.
            mass_threshold (float, optional): ``M_th`` of the mass selector.
            prune (bool, optional): prune at all.
            batch_mode (str, optional): ``'pad'`` or ``'mean'``.
            tau (float, optional): the threshold selector's temperature.
            test_execution (str, optional): ``'mask'`` or ``'drop'``.
        """
        if getattr(self, 'merge_pruned', False) and (
                test_execution == 'mask' or batch_mode == 'mean'):
            raise ValueError("merge_pruned needs test_execution='drop' and "
                             "batch_mode='pad'")
        if density is not None:
            if not 0. < density <= 1.:
                raise ValueError(f'density must be in (0, 1], got {density}')
            self.density = float(density)
        if mass_threshold is not None:
            if not 0. < mass_threshold <= 1.:
                raise ValueError(f'mass_threshold must be in (0, 1], got '
                                 f'{mass_threshold}')
            self.mass_threshold = float(mass_threshold)
        if prune is not None:
            self.prune = bool(prune)
        if batch_mode is not None:
            check_choice('batch_mode', batch_mode, BATCH_MODES)
            self.batch_mode = batch_mode
        if tau is not None:
            if tau <= 0:
                raise ValueError(f'tau must be positive, got {tau}')
            self.tau = float(tau)
        if test_execution is not None:
            check_choice('test_execution', test_execution, EXECUTIONS)
            self.test_execution = test_execution

    @property
    def prunes(self):
        """Whether the current settings remove any token."""
        if not self.prune:
            return False
        if self.selector == 'value':
            return self.density < 1.
        if self.selector == 'mass':
            return self.mass_threshold < 1.
        return True

    @property
    def execution(self):
        """``'mask'`` or ``'drop'``, by train/eval mode."""
        return self.train_execution if self.training else \
            self.test_execution

    # --- layers -----------------------------------------------------------

    #: scorers reading only the class row (fused scoring; TIS needs the map)
    CLS_ROW_SCORERS = ('asvit', 'cls', 'random')

    def _layer(self, layer, x, policy=None, need_attn=False, mode=None):
        """:func:`layer_forward` with this model's settings."""
        return layer_forward(
            layer, x, policy, need_attn, mode or self.mask_mode,
            self.training,
            'cls' if self.fused_scoring and
            self.scorer in self.CLS_ROW_SCORERS else 'all', self.policy_grad)

    def _score(self, attn, context, policy):
        """Scores ``(B, T - E)`` of the current patch tokens by ``scorer``.

        Args:
            attn (Tensor): ``(B, h, T, T)``, or the class row ``(B, h, 1, T)``.
            context (Tensor): ``(B, h, T, d)`` the attention output.
            policy (Tensor | None): ``(B, T)`` the mask the layer ran with.
        """
        if self.scorer == 'tis':
            return tis_score(attn, policy, self.num_extra_tokens)
        if self.scorer == 'asvit':
            return asvit_score(attn, context, self.num_extra_tokens)
        if self.scorer == 'random':
            return random_score(attn, self.num_extra_tokens)
        return cls_attention_score(attn, self.num_extra_tokens)

    def _select(self, scores, valid, stage):
        """Keep mask ``(B, K)``: bool, or straight-through float (threshold).

        Args:
            scores (Tensor): ``(B, K)``.
            valid (Tensor): ``(B, K)`` bool, the tokens still alive.
            stage (int): the pruning location.
        """
        if self.selector == 'value':
            counts = value_keep_counts(valid.sum(dim=-1), self.density)
            return topk_keep_mask(scores, counts, valid)
        if self.selector == 'mass':
            return mass_keep_mask(scores, self.mass_threshold, valid)[0]
        return threshold_keep_mask(scores, self.thresholds[stage], self.tau,
                                   valid)

    # --- forward ----------------------------------------------------------

    def _prune(self, state, x, scores, stage, mask):
        """Select and apply the kept tokens; returns ``(B, E + K', C)``.

        Args:
            state (PruningState): the token bookkeeping (updated).
            x (Tensor): the current tokens ``(B, E + K, C)``.
            scores (Tensor): ``(B, K)`` scores from the previous layer.
            stage (int): index into ``prune_before``.
            mask (bool): ``'mask'`` execution (else ``'drop'``).
        """
        self.scores.append(state.grid_scores(scores))
        keep = self._select(scores, state.alive, stage)
        if mask:
            x = state.mask(x, keep)
        elif self.merge_pruned:
            E = self.num_extra_tokens
            kept = (keep > 0.5 if keep.dtype != torch.bool else keep)
            tokens, state.size = merge_dropped(x[:, E:], kept, state.alive,
                                               state.size)
            x = state.drop(torch.cat((x[:, :E], tokens), dim=1), kept)
        else:
            mean = self.batch_mode == 'mean' and x.shape[0] > 1
            x = state.drop(x, keep, scores if mean else None)
        self.keep_masks.append(state.keep_mask())
        return x

    def forward(self, x):
        """Patch embedding, layers with token selection, outputs.

        Args:
            x (Tensor): images ``(B, 3, H_img, W_img)``.

        Returns:
            tuple[Tensor]: one output per ``out_indices``, by ``out_type``.
        """
        x, patch_resolution = embed_tokens(self, x)
        self._clear_records()
        state = PruningState(x, self.num_extra_tokens,
                             self.out_type in ('featmap', 'tokens'))
        self._num_patches = state.num_patches
        prunes = self.prunes
        mask = self.execution == 'mask'
        counts = []
        scores = None

        def step(i, layer, x):
            nonlocal scores
            if prunes and i in self.prune_before:
                x = self._prune(state, x, scores,
                                self.prune_before.index(i), mask)
            need_attn = (prunes or self.always_score) and \
                (i + 1) in self.prune_before
            # dropped tokens: padding is masked exactly, with -inf logits
            x, attn, context = self._layer(layer, x,
                                           state.attention_mask(mask),
                                           need_attn,
                                           None if mask else 'logits')
            if need_attn:
                scores = self._score(attn, context,
                                     state.attention_mask(mask))
                if not prunes:  # recorded for distillation only
                    self.scores.append(scores)
            counts.append(state.count)
            return x

        outs, x = run_layers(
            self,
            x,
            patch_resolution,
            step=step,
            format_output=lambda x: self._format(
                x, patch_resolution, state.index, state.alive, state.full))
        self.final_tokens, self.final_alive = x, state.alive
        self.final_index = state.index
        self.token_counts = torch.stack(counts, dim=1)
        return outs

    def _format(self, x, hw, index, alive, full):
        """Tokens -> the ``out_type`` output.

        Args:
            x (Tensor): ``(B, E + K, C)`` current tokens.
            hw (tuple[int, int]): the patch grid.
            index (Tensor): ``(B, K)`` their patch positions.
            alive (Tensor): ``(B, K)`` bool, which are kept.
            full (Tensor | None): ``(B, N, C)`` snapshot of pruned tokens.
        """
        E = self.num_extra_tokens
        if self.out_type == 'raw':
            return x
        if self.out_type == 'cls_token':
            return x[:, 0]
        if self.out_type == 'avg_featmap':
            w = alive.to(x.dtype)[..., None]
            return self.ln2((x[:, E:] * w).sum(1) / w.sum(1).clamp_min(1.))
        tokens = PrunedTokens(x, index, alive, full, tuple(hw))
        return tokens if self.out_type == 'tokens' else tokens.restore()
