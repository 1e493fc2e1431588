"""Layers for the authors' released STViT-R layout (stvit_design.md §12)."""
import functools

import torch
import torch.nn as nn
from mmcv.cnn import ConvModule
from mmcv.cnn.bricks.transformer import LayerScale
from mmdet.models.backbones.swin import ShiftWindowMSA

from mmvitaccel.ops import (host_valid, is_capturing, mask_or_none,
                            semantic_all_valid, unpadded, window_partition)
from mmvitaccel.models.stvit.semantic_attention import CrossAttentionSwinBlock


class ConvStem(nn.Module):
    """Conv stem ``X = h(BN(conv_2(h(BN(conv_1(I))))))``, no norm after.

    ``conv_i`` 3x3, stride 2, padding 1, no bias, ``h`` hard swish; ``conv_1``
    outputs ``C / 2``.

    Args:
        in_channels (int): image channels.
        embed_dims (int): ``C``, output channels (even).
    """

    def __init__(self, in_channels, embed_dims):
        super().__init__()
        if embed_dims % 2:
            raise ValueError(f'the convolutional stem halves embed_dims in '
                             f'its first layer; embed_dims must be even, got '
                             f'{embed_dims}')
        self.in_channels = in_channels
        self.embed_dims = embed_dims
        kwargs = dict(kernel_size=3, stride=2, padding=1, bias=False,
                      norm_cfg=dict(type='BN'), act_cfg=dict(type='HSwish'))
        self.layers = nn.Sequential(
            ConvModule(in_channels, embed_dims // 2, **kwargs),
            ConvModule(embed_dims // 2, embed_dims, **kwargs))

    def forward(self, x):
        """Args:
            x (Tensor): ``(B, in_channels, H, W)``.

        Returns:
            tuple[Tensor, tuple[int, int]]: tokens ``(B, H4 * W4, C)`` and
            ``(H4, W4) = (ceil(H / 4), ceil(W / 4))`` (as ``PatchEmbed``).
        """
        x = self.layers(x)
        hw_shape = (x.shape[2], x.shape[3])
        return x.flatten(2).transpose(1, 2), hw_shape


class LayerScaleCrossAttentionSwinBlock(CrossAttentionSwinBlock):
    """:class:`CrossAttentionSwinBlock` with layer scale.

    ``x' = shortcut + DropPath(gamma_1 * MHA(...))``,
    ``x = x' + DropPath(gamma_2 * FFN(LN2(x')))``; parameters
    ``attn.gamma1.weight``, ``ffn.gamma2.weight`` (mmpretrain's names).

    Args:
        embed_dims (int): channels ``C``.
        num_heads (int): attention heads.
        feedforward_channels (int): FFN hidden channels.
        layer_scale_init_value (float): initial scale, > 0 (authors: 1e-5).
        **kwargs: the other arguments of :class:`CrossAttentionSwinBlock`.
    """

    def __init__(self, embed_dims, num_heads, feedforward_channels,
                 layer_scale_init_value=1e-5, **kwargs):
        if not isinstance(layer_scale_init_value, (int, float)) or \
                isinstance(layer_scale_init_value, bool) or \
                not layer_scale_init_value > 0:
            raise ValueError(f'layer_scale must be a positive number (the '
                             f'initial scale, e.g. 1e-5), got '
                             f'{layer_scale_init_value!r}')
        super().__init__(embed_dims, num_heads, feedforward_channels,
                         **kwargs)
        self.attn.gamma1 = LayerScale(embed_dims, scale=layer_scale_init_value)
        self.ffn.gamma2 = LayerScale(embed_dims, scale=layer_scale_init_value)

    def attend(self, queries, kv, key_valid=None):
        """``gamma_1 * Proj(MHA(queries, kv))``, ``(N, Lq, C)``."""
        return self.attn.gamma1(super().attend(queries, kv, key_valid))


def _inside_axis(extent, window, size, device):
    """Coordinates ``(n, min(size, extent))`` of inside regions on one axis."""
    m = min(size, extent)
    starts = torch.arange(0, extent, window, device=device) - \
        (size - window) // 2
    starts = starts.clamp(0, extent - m)
    return starts[:, None] + torch.arange(m, device=device)


def inside_regions(x, valid, window, size):
    """Keys of the ``size x size`` region of each window, moved inside the map.

    At 14 x 14, ``w = 7``, ``size = 10``: regions ``[0, 10)``, ``[4, 14)`` per
    axis, the authors' unfold (k 10, stride 4, no padding).

    Args:
        x (Tensor): ``(B, Hp, Wp, C)``, sides multiples of ``window``.
        valid (Tensor): ``(Hp, Wp)`` bool, False on padding.
        window (int): window side.
        size (int): region side, ``>= window``.

    Returns:
        tuple[Tensor, Tensor]: keys ``(B * nW, K, C)``, validity ``(nW, K)``;
        ``K = min(size, Hp) * min(size, Wp)``.
    """
    B, H, W, C = x.shape
    rows = _inside_axis(H, window, size, x.device)
    cols = _inside_axis(W, window, size, x.device)
    index = rows[:, None, :, None] * W + cols[None, :, None, :]
    nW, K = index.shape[0] * index.shape[1], index.shape[2] * index.shape[3]
    keys = x.reshape(B, -1, C)[:, index.reshape(-1)].view(B * nW, K, C)
    return keys, valid.reshape(-1)[index].view(nW, K)


class UnshiftedSmallMapMSA(ShiftWindowMSA):
    """``ShiftWindowMSA`` leaving one-window maps unshifted (official Swin)."""

    def forward(self, query, hw_shape):
        """Args:
            query (Tensor): ``(B, H * W, C)``.
            hw_shape (tuple[int, int]): ``(H, W)``.

        Returns:
            Tensor: ``(B, H * W, C)``.
        """
        if self.shift_size and max(hw_shape) <= self.window_size:
            shift, self.shift_size = self.shift_size, 0
            try:
                return super().forward(query, hw_shape)
            finally:
                self.shift_size = shift
        return super().forward(query, hw_shape)


def _region_kv(block, x, valid, window, size, per_region, extra=None,
               extra_valid=None):
    """``[extra; region]`` keys/values ``(B * nW, Le + K, 2C)``, validity."""
    w = window
    if per_region:  # LN and projection on every region
        keys, key_valid = inside_regions(x, valid, w, size)
        if extra is not None:
            keys = torch.cat([extra, keys], 1)
        kv = block.key_values(keys)
    else:  # LN and projection once per token, then gathered
        kv, key_valid = inside_regions(block.key_values(x), valid, w,
                                       size)
        if extra is not None:
            kv = torch.cat([block.key_values(extra), kv], 1)
    if extra is not None:
        key_valid = torch.cat([extra_valid, key_valid], 1)
    return kv, key_valid


@functools.lru_cache(maxsize=256)
def _inside_regions_all_valid(hw, padded_hw, window, size):
    """Whether every :func:`inside_regions` key is valid (CPU twin)."""
    x = torch.zeros(1, *padded_hw, 1)
    _, valid = inside_regions(x, host_valid(hw, padded_hw), window, size)
    return bool(valid.all())


def _keys_all_valid(hw, padded_hw, window, size, sem_all_valid):
    """Host-known: ``[S; region]`` keys all valid (None: unknown)."""
    if sem_all_valid is None or hw is None or is_capturing():
        return None
    return sem_all_valid and _inside_regions_all_valid(
        tuple(hw), tuple(padded_hw), window, size)


def authors_stgm(seq, g, G, stgm1, stgm2, x, valid, hw=None):
    """STGM in the form of the authors' released classification code.

    * STGM-1: ``S1 = MHA(P, [P; X_k1], [P; X_k1])``, no residual, then FFN;
    * STGM-2: ``S2 = MHA(S1 + G, [S1; X_k2], [S1; X_k2]) + (S1 + G)``, ``S1``
      of every window; ``X_k`` regions moved inside the map.

    Args:
        seq (SemanticSwinBlockSequence): the stage.
        g (int): unit index (its pooling).
        G (Tensor | None): the unit's global centres ``(1, w_s^2, C)``.
        stgm1 (CrossAttentionSwinBlock): STGM layer 1.
        stgm2 (CrossAttentionSwinBlock): STGM layer 2.
        x (Tensor): ``(B, Hp, Wp, C)``, sides multiples of the window.
        valid (Tensor): ``(Hp, Wp)`` bool, False on padding.
        hw (tuple[int, int], optional): the real ``(H, W)`` (host masks).

    Returns:
        tuple[Tensor, Tensor, Tensor]: as
        :meth:`~mmvitaccel.models.stvit.semantic_swin_stage.
        SemanticSwinBlockSequence.generate`.
    """
    w = seq.window_size
    B, Hp, Wp, C = x.shape
    nW = (Hp // w) * (Wp // w)
    windows = window_partition(x, w)
    pool = seq.poolers[g] if seq.poolers is not None else \
        seq._fixed_pooling
    centres, sem_valid = pool(windows, valid=window_partition(valid, w))
    sem_valid = sem_valid[:nW]
    k1, k2 = seq.key_windows
    sem_all = semantic_all_valid(hw, (Hp, Wp), w, seq.semantic_window)
    # STGM-1: S1 = MHA(P, [P; X_k1]) (no residual), FFN
    kv, key_valid = _region_kv(stgm1, x, valid, w, k1, seq.kv_per_region,
                               centres, sem_valid)
    sem = stgm1(centres, kv,
                mask_or_none(key_valid, _keys_all_valid(
                    hw, (Hp, Wp), w, k1, sem_all)),
                shortcut=torch.zeros_like(centres))
    # STGM-2: S2 = MHA(S1 + G, [S1; X_k2]) + S1 + G
    query = sem if G is None else sem + G
    Ls = sem.shape[1]
    all_sem = sem.reshape(B, nW * Ls, C)
    all_valid = sem_valid.reshape(1, -1)
    if Hp <= k2 and Wp <= k2:  # every region is the map: one key set
        keys = torch.cat([all_sem, x.reshape(B, Hp * Wp, C)], 1)
        key_valid = torch.cat([all_valid, valid.reshape(1, -1)], 1)
        # no padding: every key valid
        out = stgm2(query.reshape(B, nW * Ls, C), stgm2.key_values(keys),
                    mask_or_none(key_valid, unpadded(hw, (Hp, Wp))))
        return windows, out.view(B * nW, Ls, C), sem_valid
    extra = all_sem.repeat_interleave(nW, 0)
    kv, key_valid = _region_kv(stgm2, x, valid, w, k2, seq.kv_per_region,
                               extra, all_valid.expand(nW, -1))
    return windows, stgm2(query, kv, mask_or_none(
        key_valid, _keys_all_valid(hw, (Hp, Wp), w, k2, sem_all))), sem_valid
