"""Token-pruned ViT/DeiT: SaiT and AS-ViT in one backbone.

Papers: Li et al., *SaiT: Sparse Vision Transformers through Adaptive Token
Pruning* (2022); Liu et al., *Adaptive Sparse ViT* (IJCAI 2023). Formulas in
:mod:`mmvitaccel.ops.token_pruning` and ``shared/papers/NOTES.md``.

Before each layer in ``prune_before`` the patch tokens are scored from the
attention of the layer just before it and a selector decides which are kept;
the class token is always kept. The host's layers are mmpretrain's
``TransformerEncoderLayer`` unchanged: where a layer's attention map is
needed (to score) or a mask must enter its softmax, the layer's own ``ln1``,
``attn.qkv``, ``attn.proj``, ``ln2`` and ``ffn`` are applied here; every
other layer is called as it is. mmpretrain DeiT/ViT checkpoints load without
conversion (the only new parameter is AS-ViT's ``thresholds``).
"""
from numbers import Real
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmpretrain.models.backbones import VisionTransformer

from ...ops import (BATCH_MODES, MASK_MODES, SCORERS, SELECTORS, asvit_score,
                    batch_mean_keep_mask, check_choice, cls_attention_score,
                    mass_keep_mask, masked_attention, pad_kept_tokens,
                    restore_tokens, threshold_keep_mask, tis_score,
                    topk_keep_mask, value_keep_counts, vit_layer_flops)
from ...registry import MODELS
from ..utils import as_int_tuple, check_finite, embed_tokens
from .stvit_deit import DEIT_ARCHS

EXECUTIONS = ('mask', 'drop')


class PrunedTokens(NamedTuple):
    """A pruned token sequence and what is needed to restore the grid.

    Attributes:
        tokens (Tensor): ``(B, 1 + K, C)`` class token and current tokens.
        index (Tensor): ``(B, K)`` their patch positions.
        alive (Tensor): ``(B, K)`` bool, False for pruned (masked) tokens
            and padding.
        dropped (Tensor): ``(B, N, C)`` each position's features when it was
            pruned (stale for alive positions).
        hw (tuple[int, int]): the patch grid.
    """
    tokens: torch.Tensor
    index: torch.Tensor
    alive: torch.Tensor
    dropped: torch.Tensor
    hw: tuple

    def restore(self):
        """The full grid ``(B, C, H, W)``: alive tokens where they are,
        pruned positions from the layer where they were dropped."""
        grid = restore_tokens(self.dropped, self.tokens[:, 1:], self.index,
                              self.alive)
        return grid.transpose(1, 2).reshape(grid.shape[0], -1, *self.hw)


def layer_forward(layer, x, policy=None, need_attn=False, mode='logits',
                  training=False):
    """One upstream ViT layer, with a policy in its softmax and/or returning
    its attention.

    ``x' = x + gamma1(Proj(A V))``, ``A = softmax(Q K^T / sqrt(d))``
    masked by ``policy``; ``out = FFN(ln2(x'), identity=x')``; with
    ``Q, K, V`` from ``attn.qkv(ln1(x))``.

    Args:
        layer (TransformerEncoderLayer): an upstream layer.
        x (Tensor): ``(B, T, C)``.
        policy (Tensor, optional): ``(B, T)`` float policy.
        need_attn (bool): return the attention and context.
        mode (str): the mask mode, ``'logits'`` or ``'policy'``.
        training (bool): apply the attention dropout.

    Returns:
        tuple: ``(out (B, T, C), attn (B, h, T, T) | None,
        context (B, h, T, d) | None)``.
    """
    if policy is None and not need_attn:
        return layer(x), None, None
    mha = layer.attn
    B, T, C = x.shape
    qkv = mha.qkv(layer.ln1(x)).reshape(B, T, 3, mha.num_heads,
                                        mha.head_dims).permute(
                                            2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    if need_attn or mode == 'policy':
        context, attn = masked_attention(q, k, v, mha.head_dims**-0.5,
                                         policy, mode)
        if training and mha.attn_drop > 0:  # as upstream's SDPA
            context = F.dropout(attn, mha.attn_drop) @ v
    else:
        # 'logits' in the fused kernel: a bool key mask gives pruned keys a
        # weight of exactly zero, the value their -65000 logit rounds to
        keys = (policy > 0)[:, None, None, :]
        context, attn = F.scaled_dot_product_attention(
            q, k, v, attn_mask=keys,
            dropout_p=mha.attn_drop if training else 0.), None
    out = mha.proj(context.transpose(1, 2).reshape(B, T, C))
    x = x + mha.out_drop(mha.gamma1(mha.proj_drop(out)))
    x = layer.ffn(layer.ln2(x), identity=x)
    return x, attn, context


def tokens_and_last_attention(vit, images):
    """Run an mmpretrain ``VisionTransformer`` (a teacher) and return its
    final tokens (after the final norm), the last layer's attention and
    the patch grid.

    Args:
        vit (VisionTransformer): the model (one class token required).
        images (Tensor): ``(B, 3, H, W)``.

    Returns:
        tuple[Tensor, Tensor, tuple[int, int]]: ``(B, T, C)`` tokens,
        ``(B, h, T, T)`` attention of the last layer and the patch grid
        ``(H, W)`` (for the teacher's own ``_format_output``).
    """
    if getattr(vit, 'cls_token', None) is None or \
            vit.num_extra_tokens != 1:
        raise ValueError('the teacher must be a ViT with exactly one class '
                         'token (no distillation token), got '
                         f'{type(vit).__name__} with {vit.num_extra_tokens} '
                         'extra tokens')
    x, hw = embed_tokens(vit, images)
    last = len(vit.layers) - 1
    attn = None
    for i, layer in enumerate(vit.layers):
        x, attn_i, _ = layer_forward(layer, x, need_attn=i == last)
        attn = attn_i if i == last else attn
    if vit.final_norm:
        x = vit.ln1(x)
    return x, attn, hw


@MODELS.register_module()
class TokenPrunedVisionTransformer(VisionTransformer):
    """A ViT/DeiT whose later layers run on the informative tokens only.

    With ``T = 1 + N`` tokens ``[cls; x_1 .. x_N]``:

    1. layers before ``prune_before[0]`` are upstream layers on all tokens;
    2. before layer ``l = prune_before[s]``, the attention ``A`` of layer
       ``l - 1`` gives scores ``S`` ``(B, N)`` (``scorer``): SaiT's TIS,
       AS-ViT's head-weighted class attention or plain class attention;
    3. the ``selector`` keeps tokens: ``'value'`` the top
       ``round(rho (N + 1)) - 1`` (``rho = density``), ``'mass'`` the fewest
       reaching ``M_th = mass_threshold`` of the score, ``'threshold'``
       ``S > theta_s`` (learnable, a straight-through sigmoid of temperature
       ``tau`` in training);
    4. *execution*: ``'mask'`` keeps all tokens and masks the pruned keys out
       of every later softmax (``mask_mode='logits'``: ``-65000`` logits,
       SaiT; ``'policy'``: the policy softmax keeping the diagonal, AS-ViT);
       ``'drop'`` gathers the kept tokens. A batch whose images keep
       different counts is padded and the padding masked
       (``batch_mode='pad'``, exact) or cut to the batch-mean count
       (``batch_mode='mean'``, AS-ViT's batched inference, faster). By
       default training masks and inference drops.

    The selection settings change at test time through :meth:`set_pruning`
    (or a classifier's ``test_cfg``). With ``density=1.0`` (value) or
    ``mass_threshold=1.0`` (mass) nothing is scored or pruned and the output
    equals mmpretrain's ``VisionTransformer`` exactly; ``prune=False`` does the
    same for any selector (SaiT's dense epochs).

    After a forward, :attr:`keep_masks` holds, per pruning location, the
    ``(B, N)`` bool mask of patch positions still alive after it;
    :attr:`kept_indices` the same as index lists, :meth:`layer_keep_mask`
    the mask of any layer; :attr:`scores` the
    ``(B, N)`` scores over the original grid (zero where already pruned) and
    :attr:`token_counts` ``(B, num_layers)`` the tokens each layer processes
    (float; differentiable through the soft threshold mask in training);
    :attr:`final_tokens` ``(B, T', C)`` the last layer's tokens,
    :attr:`final_index` ``(B, T' - 1)`` their patch positions and
    :attr:`final_alive` ``(B, T' - 1)`` which of them are kept.

    Args:
        arch (str | dict): ``'deit-tiny'``/``'deit-small'``/``'deit-base'``
            (or ``'tiny'``/``'small'``/``'base'``, read as DeiT), any arch of
            ``VisionTransformer``, or a dict with ``embed_dims``,
            ``num_layers``, ``num_heads``, ``feedforward_channels``.
        prune_before (int | Sequence[int]): 0-based layers before which
            tokens are selected, increasing, each in ``1 .. num_layers - 1``
            (an int is one location); ``(3, )`` is SaiT-S (TIS of the third
            layer), ``(4, 7, 10)`` AS-ViT.
        scorer (str): ``'tis'``, ``'asvit'`` or ``'cls'``.
        selector (str): ``'value'``, ``'mass'`` or ``'threshold'``.
        density (float): ``rho`` of the value selector, in ``(0, 1]``,
            applied to the tokens alive at each location.
        mass_threshold (float): ``M_th`` of the mass selector, in ``(0, 1]``.
        thresholds (float | Sequence[float]): initial ``theta`` per
            location for the threshold selector (learnable; a number is one
            location), finite (a NaN would prune every patch; refused here
            and in a loaded state dict); AS-ViT: 0.001, 0.002, 0.003.
        tau (float): the sigmoid temperature of the threshold selector.
        mask_mode (str): ``'logits'`` or ``'policy'``, see above.
        train_execution (str): ``'mask'`` or ``'drop'`` while training;
            ``'drop'`` is refused with the threshold selector (its gradient
            goes through the mask).
        test_execution (str): ``'mask'`` or ``'drop'`` in eval mode.
        batch_mode (str): ``'pad'`` or ``'mean'``, batched dropping.
        prune (bool): whether to prune at all.
        out_type (str): ``'cls_token'`` (DeiT's head), ``'avg_featmap'``
            (``ln2`` of the mean over the kept patch tokens), ``'featmap'``
            (the patch grid ``(B, C, H, W)`` with pruned positions restored
            from the layer where they were dropped) or ``'raw'``
            (``(B, T', C)`` tokens as they are) or ``'tokens'``
            (:class:`PrunedTokens`, for :class:`TokenRestoreNeck`).
        **kwargs: the other arguments of mmpretrain's ``VisionTransformer``.
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
                 train_execution='mask',
                 test_execution='drop',
                 batch_mode='pad',
                 prune=True,
                 out_type='cls_token',
                 **kwargs):
        if isinstance(arch, str):
            arch = DEIT_ARCHS.get(arch.lower(), arch.lower())
        check_choice('scorer', scorer, SCORERS)
        check_choice('selector', selector, SELECTORS)
        check_choice('mask_mode', mask_mode, MASK_MODES)
        check_choice('train_execution', train_execution, EXECUTIONS)
        check_choice('test_execution', test_execution, EXECUTIONS)
        check_choice('batch_mode', batch_mode, BATCH_MODES)
        check_choice('out_type', out_type, sorted(self.OUT_TYPES))
        if selector == 'threshold' and train_execution == 'drop':
            raise ValueError(
                "the threshold selector learns through its soft mask; "
                "train it with train_execution='mask'")
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
        self.train_execution = train_execution
        self.test_execution = test_execution
        self.batch_mode = batch_mode
        self.prune = prune
        self.tau = tau
        #: score at the pruning locations even when nothing is pruned (set
        #: by a classifier that distils the scores in dense epochs)
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
        """Refuse non-finite learned thresholds (they would prune every
        patch) before loading them."""
        key = prefix + 'thresholds'
        if self.thresholds is not None and key in state_dict:
            check_finite(f'thresholds (state dict key {key!r})',
                         state_dict[key])
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # --- settings ---------------------------------------------------------

    def set_pruning(self, density=None, mass_threshold=None, prune=None,
                    batch_mode=None, tau=None, test_execution=None):
        """Change the pruning settings on the fly (``None`` leaves one as
        it is).

        Args:
            density (float, optional): ``rho`` of the value selector.
            mass_threshold (float, optional): ``M_th`` of the mass selector.
            prune (bool, optional): prune at all.
            batch_mode (str, optional): ``'pad'`` or ``'mean'``.
            tau (float, optional): the threshold selector's temperature.
            test_execution (str, optional): ``'mask'`` or ``'drop'``.
        """
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

    def _clear_records(self):
        self.keep_masks = []
        self.scores = []
        self.token_counts = None
        self.final_tokens = None
        self.final_alive = None
        self.final_index = None

    def layer_keep_mask(self, layer):
        """The patch positions layer ``layer`` processes in the last
        forward: ``(B, N)`` bool (all True before the first pruning, and
        when nothing was pruned).

        Args:
            layer (int): a layer index, ``0 .. num_layers - 1``.
        """
        if not 0 <= layer < self.num_layers:
            raise ValueError(f'layer must be in 0..{self.num_layers - 1}, '
                             f'got {layer}')
        if self.token_counts is None:
            raise ValueError('no forward has run yet')
        stages = [s for s, p in enumerate(self.prune_before) if p <= layer]
        if not stages or not self.keep_masks:
            return torch.ones(self.token_counts.shape[0], self._num_patches,
                              dtype=torch.bool,
                              device=self.token_counts.device)
        return self.keep_masks[stages[-1]]

    @property
    def kept_indices(self):
        """Per pruning location, a list over the batch of the ``(K_b,)``
        kept patch positions (ascending) after it."""
        return [[m.nonzero().flatten() for m in keep]
                for keep in self.keep_masks]

    # --- FLOPs ------------------------------------------------------------

    def analytic_flops(self, token_counts=None):
        """Per-image FLOPs of the transformer layers, from token counts.

        ``sum_l FLOPs_layer(n_l)`` (:func:`vit_layer_flops`, the
        :func:`count_flops` convention) plus the final norm ``5 n_L C``; the
        patch embedding and the head are the same for every density and
        left out.

        Args:
            token_counts (Tensor, optional): ``(B, num_layers)``; default the
                last forward's :attr:`token_counts`.

        Returns:
            Tensor: ``(B,)``.
        """
        counts = self.token_counts if token_counts is None else token_counts
        flops = vit_layer_flops(counts, self.embed_dims,
                                self.arch_settings['feedforward_channels'])
        norm = 5 * self.embed_dims * counts[:, -1] if self.final_norm else 0.
        return flops.sum(dim=-1) + norm

    def dense_flops(self, num_tokens):
        """:meth:`analytic_flops` of the unpruned model on ``num_tokens``
        tokens (class token included)."""
        norm = 5 * self.embed_dims * num_tokens if self.final_norm else 0
        return self.num_layers * vit_layer_flops(
            float(num_tokens), self.embed_dims,
            self.arch_settings['feedforward_channels']) + norm

    # --- layers -----------------------------------------------------------

    def _layer(self, layer, x, policy=None, need_attn=False, mode=None):
        """:func:`layer_forward` with this model's mask mode."""
        return layer_forward(layer, x, policy, need_attn,
                             mode or self.mask_mode, self.training)

    def _score(self, attn, context, policy):
        if self.scorer == 'tis':
            return tis_score(attn, policy, self.num_extra_tokens)
        if self.scorer == 'asvit':
            return asvit_score(attn, context, self.num_extra_tokens)
        return cls_attention_score(attn, self.num_extra_tokens)

    def _select(self, scores, valid, stage):
        """Keep mask over the current patch tokens: bool for value/mass,
        straight-through float for threshold (training)."""
        if self.selector == 'value':
            counts = value_keep_counts(valid.sum(dim=-1), self.density)
            return topk_keep_mask(scores, counts, valid)
        if self.selector == 'mass':
            return mass_keep_mask(scores, self.mass_threshold, valid)[0]
        return threshold_keep_mask(scores, self.thresholds[stage], self.tau,
                                   valid)

    # --- forward ----------------------------------------------------------

    def forward(self, x):
        """Patch embedding, layers with token selection, outputs.

        Args:
            x (Tensor): images ``(B, 3, H_img, W_img)``.

        Returns:
            tuple[Tensor]: one output per ``out_indices``, by ``out_type``.
        """
        B = x.shape[0]
        x, patch_resolution = embed_tokens(self, x)

        E, N = self.num_extra_tokens, x.shape[1] - self.num_extra_tokens
        self._clear_records()
        self._num_patches = N
        prunes = self.prunes
        mask = self.execution == 'mask'
        device = x.device
        # the state: current tokens x (B, E + K, C); their patch positions
        # (B, K); which of them are alive (B, K) (False: pruned in 'mask'
        # execution, padding in 'drop'); the soft policy (mask execution)
        index = torch.arange(N, device=device).expand(B, N)
        alive = torch.ones(B, N, dtype=torch.bool, device=device)
        policy = None  # (B, E + N) float, 'mask' execution
        key_mask = None  # (B, E + K) bool, 'drop' execution with padding
        full = x[:, E:] if self.out_type in ('featmap', 'tokens') else None
        counts = []
        count = x.new_full((B, ), float(E + N))

        outs = []
        for i, layer in enumerate(self.layers):
            if prunes and i in self.prune_before:
                stage = self.prune_before.index(i)
                # scores over the current tokens -> over the full grid
                grid = scores.new_zeros(B, N).scatter(
                    1, index, scores.masked_fill(~alive, 0.))
                self.scores.append(grid)
                keep = self._select(scores, alive, stage)
                if mask:
                    if keep.dtype == torch.bool:
                        keep = keep.to(x.dtype)
                    patch_policy = keep if policy is None else \
                        policy[:, E:] * keep
                    policy = torch.cat((x.new_ones(B, E), patch_policy),
                                       dim=1)
                    new_alive = patch_policy > 0.5
                    if full is not None:  # snapshot of tokens dropped here
                        dropped = (alive & ~new_alive)[..., None]
                        full = torch.where(dropped, x[:, E:], full)
                    alive = new_alive
                    count = E + patch_policy.sum(dim=-1)
                else:
                    keep = keep > 0.5 if keep.dtype != torch.bool else keep
                    if self.batch_mode == 'mean' and B > 1:
                        keep = batch_mean_keep_mask(
                            scores.masked_fill(~alive, float('-inf')),
                            keep & alive)
                    keep = keep & alive
                    if full is not None:
                        full = restore_tokens(full, x[:, E:], index, alive)
                    x, sub, key_mask = pad_kept_tokens(x, keep, E)
                    index = index.gather(1, sub)
                    alive = keep.gather(1, sub)
                    count = (E + alive.sum(dim=-1)).to(x.dtype)
                self.keep_masks.append(
                    alive.new_zeros(B, N).scatter(1, index, alive))
            need_attn = (prunes or self.always_score) and \
                (i + 1) in self.prune_before
            # dropped tokens: padding is masked exactly, with -inf logits
            x, attn, context = self._layer(
                layer, x, policy if mask else key_mask, need_attn,
                None if mask else 'logits')
            if need_attn:
                scores = self._score(attn, context,
                                     policy if mask else key_mask)
                if not prunes:  # recorded for distillation only
                    self.scores.append(scores)
            counts.append(count)

            if i == len(self.layers) - 1:
                if self.final_norm:
                    x = self.ln1(x)
                self.final_tokens, self.final_alive = x, alive
                self.final_index = index
            if i in self.out_indices:
                outs.append(
                    self._format(x, patch_resolution, index, alive, full))
        self.token_counts = torch.stack(counts, dim=1)
        return tuple(outs)

    def _format(self, x, hw, index, alive, full):
        """Tokens -> the ``out_type`` output."""
        E = self.num_extra_tokens
        if self.out_type == 'raw':
            return x
        if self.out_type == 'cls_token':
            return x[:, 0]
        if self.out_type == 'avg_featmap':
            w = alive.to(x.dtype)[..., None]
            return self.ln2((x[:, E:] * w).sum(1) / w.sum(1).clamp_min(1.))
        # kept tokens scattered onto the grid, the pruned positions from the
        # snapshot taken when they were pruned
        tokens = PrunedTokens(x, index, alive, full, tuple(hw))
        return tokens if self.out_type == 'tokens' else tokens.restore()
