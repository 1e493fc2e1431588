"""DGSSA attention, ``Proj(softmax(S + mask) . V)``: static counterparts of
mmpretrain's ``MultiheadAttention`` and mmdet's ``ShiftWindowMSA``, with
upstream names (fused ``qkv`` -> its V rows ``v``)."""
import torch
import torch.nn as nn
from mmengine.model import BaseModule

from mmvitaccel.ops import (attention_probs, mask_logits, mask_or_none,
                            pad_to_multiple, shift_regions, static_attention,
                            unpadded, window_mask, window_partition,
                            window_reverse)
from mmvitaccel.ops import \
    relative_position_bias as gather_relative_position_bias


def static_blocks_for(depths):
    """DGSSA's static block count ``P`` on a Swin: half its ``N`` blocks.

    Args:
        depths (Sequence[int]): blocks per stage.

    Returns:
        int: ``N // 2``.

    Raises:
        ValueError: fewer than 4 blocks.
    """
    total = sum(depths)
    if total < 4:
        raise ValueError(f'dgssa needs at least 4 blocks, the host has '
                         f'{total}')
    return total // 2


def _value_rows(qkv):
    """``(weight, bias)`` of V in a fused ``qkv`` Linear ``(3C, C)``."""
    C = qkv.weight.shape[0] // 3
    bias = None if qkv.bias is None else qkv.bias[2 * C:]
    return qkv.weight[2 * C:], bias


class StaticMultiheadAttention(BaseModule):
    """DGSSA for a ViT layer: ``out = Proj(softmax(S) . V)``, ``S (h, N, N)``.

    FLOPs ``N^2 d + 2 N d^2`` instead of ``2 N^2 d + 4 N d^2``.

    Args:
        embed_dims (int): ``d``.
        num_heads (int): ``h``.
        num_tokens (int): ``N``, class token included.
        attn_drop (float): dropout on the static attention matrix.
        proj_drop (float): dropout after ``proj``.
        dropout_layer (nn.Module | None): drop path (upstream's ``out_drop``).
        qkv_bias (bool): bias of ``v``.
        proj_bias (bool): bias of ``proj``.
        gamma1 (nn.Module | None): layer scale (upstream's ``gamma1``).
    """

    def __init__(self,
                 embed_dims,
                 num_heads,
                 num_tokens,
                 attn_drop=0.,
                 proj_drop=0.,
                 dropout_layer=None,
                 qkv_bias=True,
                 proj_bias=True,
                 gamma1=None,
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        if embed_dims % num_heads:
            raise ValueError(f'embed_dims {embed_dims} is not a multiple of '
                             f'num_heads {num_heads}')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.num_tokens = num_tokens
        self.head_dims = embed_dims // num_heads
        self.static_logits = nn.Parameter(
            torch.zeros(num_heads, num_tokens, num_tokens))
        self.v = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(embed_dims, embed_dims, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop)
        self.out_drop = dropout_layer or nn.Identity()
        self.gamma1 = gamma1 or nn.Identity()

    @classmethod
    def from_dynamic(cls, attn, num_tokens, logits=None):
        """Convert an mmpretrain ``MultiheadAttention``, keeping V and Proj.

        Args:
            attn (MultiheadAttention): the dynamic attention.
            num_tokens (int): ``N``.
            logits (Tensor, optional): ``S`` ``(h, N, N)``; zeros if None.

        Returns:
            StaticMultiheadAttention
        """
        new = cls(attn.embed_dims, attn.num_heads, num_tokens,
                  attn_drop=attn.attn_drop,
                  proj_drop=attn.proj_drop.p,
                  dropout_layer=attn.out_drop,
                  qkv_bias=attn.qkv.bias is not None,
                  proj_bias=attn.proj.bias is not None,
                  gamma1=attn.gamma1)
        weight, bias = _value_rows(attn.qkv)
        with torch.no_grad():
            new.v.weight.copy_(weight)
            if bias is not None:
                new.v.bias.copy_(bias)
            new.proj.load_state_dict(attn.proj.state_dict())
            if logits is not None:
                new.static_logits.copy_(logits)
        return new.to(attn.qkv.weight.device)

    def forward(self, x):
        """Args:
            x (Tensor): ``(B, N, d)``.

        Returns:
            Tensor: ``(B, N, d)``.
        """
        B, N, _ = x.shape
        if N != self.num_tokens:
            raise ValueError(f'static attention built for {self.num_tokens} '
                             f'tokens, got {N}; DGSSA needs the input size '
                             f'it was built for (img_size)')
        v = self.v(x).view(B, N, self.num_heads,
                           self.head_dims).transpose(1, 2)
        logits = self.static_logits
        if self.training and self.attn_drop > 0:
            # dropout on the shared matrix: drop keys, softmax renormalises
            keep = torch.rand_like(logits) >= self.attn_drop
            logits = mask_logits(logits, keep)
        x = static_attention(logits, v)  # softmax(S) . V
        x = x.transpose(1, 2).reshape(B, N, self.embed_dims)
        x = self.proj(x)
        return self.out_drop(self.gamma1(self.proj_drop(x)))


class StaticWindowMSA(BaseModule):
    """Static window attention: ``Proj(softmax(S + mask) . V)`` per window,
    one ``S`` ``(h, w^2, w^2)`` for all (mmdet ``WindowMSA`` names).

    Args:
        embed_dims (int): ``C``.
        num_heads (int): ``h``.
        window_size (int): ``w``.
        qkv_bias (bool): bias of ``v``.
        proj_drop_rate (float): dropout after ``proj``.
    """

    def __init__(self, embed_dims, num_heads, window_size, qkv_bias=True,
                 proj_drop_rate=0.):
        super().__init__()
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.window_size = window_size
        n = window_size * window_size
        self.static_logits = nn.Parameter(torch.zeros(num_heads, n, n))
        self.v = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop_rate)

    def forward(self, x, mask=None):
        """Args:
            x (Tensor): windows ``(B * nW, w^2, C)``.
            mask (Tensor, optional): ``(nW, w^2, w^2)``, bool or additive.

        Returns:
            Tensor: ``(B * nW, w^2, C)``.
        """
        B, N, C = x.shape
        v = self.v(x).view(B, N, self.num_heads, -1).transpose(1, 2)
        x = static_attention(self.static_logits, v, mask)
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj_drop(self.proj(x))


class StaticShiftWindowMSA(BaseModule):
    """DGSSA for a Swin block: mmdet's ``ShiftWindowMSA`` with static window
    attention; ``mask`` forbids other shift regions and padded keys.

    Args:
        embed_dims (int): ``C``.
        num_heads (int): ``h``.
        window_size (int): ``w``.
        shift_size (int): cyclic shift, ``0 <= shift < w``.
        qkv_bias (bool): bias of ``v``.
        proj_drop_rate (float): dropout after ``proj``.
        dropout_layer (nn.Module | None): drop path (upstream ``drop``).
    """

    def __init__(self, embed_dims, num_heads, window_size, shift_size=0,
                 qkv_bias=True, proj_drop_rate=0., dropout_layer=None):
        super().__init__()
        if not 0 <= shift_size < window_size:
            raise ValueError(f'shift {shift_size} must be in 0..'
                             f'{window_size - 1}')
        self.window_size = window_size
        self.shift_size = shift_size
        self.w_msa = StaticWindowMSA(embed_dims, num_heads, window_size,
                                     qkv_bias, proj_drop_rate)
        self.drop = dropout_layer or nn.Identity()

    @classmethod
    def from_dynamic(cls, attn, logits=None):
        """Convert an mmdet ``ShiftWindowMSA``, keeping V and Proj (fold the
        relative position bias into ``logits`` beforehand).

        Args:
            attn (ShiftWindowMSA): the dynamic attention.
            logits (Tensor, optional): ``S`` ``(h, w^2, w^2)``.

        Returns:
            StaticShiftWindowMSA
        """
        msa = attn.w_msa
        new = cls(msa.embed_dims, msa.num_heads, attn.window_size,
                  attn.shift_size, msa.qkv.bias is not None,
                  msa.proj_drop.p, attn.drop)
        weight, bias = _value_rows(msa.qkv)
        with torch.no_grad():
            new.w_msa.v.weight.copy_(weight)
            if bias is not None:
                new.w_msa.v.bias.copy_(bias)
            new.w_msa.proj.load_state_dict(msa.proj.state_dict())
            if logits is not None:
                new.w_msa.static_logits.copy_(logits)
        return new.to(msa.qkv.weight.device)

    def attention_mask(self, valid, all_valid=None):
        """Bool mask ``(nW, w^2, w^2)`` of the shifted, padded map, or None.

        Args:
            valid (Tensor): ``(Hp, Wp)`` bool, already shifted.
            all_valid (bool, optional): nothing padded (else ``valid`` is
                read: a sync).
        """
        w, s = self.window_size, self.shift_size
        if s == 0 and mask_or_none(valid, all_valid) is None:
            return None
        labels = window_partition(
            shift_regions(*valid.shape, w, s, valid.device), w)
        keys = window_partition(valid, w)  # (nW, w^2)
        return (labels[:, :, None] == labels[:, None, :]) & keys[:, None, :]

    def forward(self, query, hw_shape):
        """Args:
            query (Tensor): ``(B, H * W, C)``.
            hw_shape (tuple[int, int]): ``(H, W)``.

        Returns:
            Tensor: ``(B, H * W, C)``.
        """
        B, L, C = query.shape
        H, W = hw_shape
        if L != H * W:
            raise ValueError(f'{L} tokens for a {H}x{W} map')
        w, s = self.window_size, self.shift_size
        x, valid = pad_to_multiple(query.view(B, H, W, C), w)
        Hp, Wp = valid.shape
        if s:
            x = torch.roll(x, shifts=(-s, -s), dims=(1, 2))
            valid = torch.roll(valid, shifts=(-s, -s), dims=(0, 1))
        windows = window_partition(x, w)
        windows = self.w_msa(windows, self.attention_mask(
            valid, unpadded((H, W), (Hp, Wp))))
        x = window_reverse(windows, w, Hp, Wp)
        if s:
            x = torch.roll(x, shifts=(s, s), dims=(1, 2))
        x = x[:, :H, :W].reshape(B, H * W, C)
        return self.drop(x)


def window_attention(msa, x, mask=None):
    """Attention probabilities of an mmdet ``WindowMSA``, bias and mask in.

    Args:
        msa (WindowMSA): the module.
        x (Tensor): windows ``(B * nW, w^2, C)``.
        mask (Tensor, optional): upstream's additive ``(nW, w^2, w^2)``.

    Returns:
        Tensor: ``(B * nW, h, w^2, w^2)``.
    """
    B, N, C = x.shape
    qkv = msa.qkv(x).reshape(B, N, 3, msa.num_heads, -1).permute(2, 0, 3, 1,
                                                                   4)
    if mask is not None:
        mask = window_mask(mask, B)
    return attention_probs(qkv[0], qkv[1], msa.scale,
                           relative_position_bias(msa), mask)


def relative_position_bias(msa):
    """``(h, w^2, w^2)`` relative position bias of an mmdet ``WindowMSA``."""
    return gather_relative_position_bias(msa.relative_position_bias_table,
                                         msa.relative_position_index)


def vit_attention(attn, x):
    """The attention probabilities of an mmpretrain ``MultiheadAttention``.

    Args:
        attn (MultiheadAttention): the module.
        x (Tensor): its input ``(B, N, d)`` (after ``ln1``).

    Returns:
        Tensor: ``(B, h, N, N)``.
    """
    B, N, _ = x.shape
    qkv = attn.qkv(x).reshape(B, N, 3, attn.num_heads,
                              attn.head_dims).permute(2, 0, 3, 1, 4)
    return attention_probs(qkv[0], qkv[1], attn.head_dims**-0.5)
