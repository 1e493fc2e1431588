"""hMHSA attention on upstream modules (ViT/DeiT, Swin; PVT in
:mod:`.hmhsa_sra`): fused ``qkv`` -> ``q``, ``k`` (``C -> C/2``), ``v``."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn.bricks.drop import build_dropout
from mmpretrain.models.backbones.vision_transformer import \
    TransformerEncoderLayer
from mmpretrain.models.utils import LayerScale, WindowMSA

from mmvitaccel.ops import (AttentionHallucination, check_even_heads,
                            check_hmhsa_form, eager_inference,
                            hallucinated_attention, relative_position_bias,
                            weight_cache, window_mask)
from mmvitaccel.models.hvit.cffn import compact_ffn

__all__ = [
    'HallucinatedAttentionMixin', 'HallucinatedMultiheadAttention',
    'HallucinatedWindowMSA', 'HViTEncoderLayer',
    'is_hallucinated', 'resolve_hmhsa_stages', 'square_grid'
]


def square_grid(num_tokens, where='tokens'):
    """``(s, s)`` for ``s * s == num_tokens``, else a clear error."""
    side = math.isqrt(num_tokens)
    if side * side != num_tokens:
        raise ValueError(
            f'{where}: {num_tokens} grid tokens are not a square; pass '
            f'hw_shape to give the key grid of a non-square input')
    return side, side


class HallucinatedAttentionMixin:
    """``q``/``k``/``v`` projections and the IHH + CHH hallucination;
    subclasses call :meth:`_init_hallucinated` and :meth:`_attend`."""

    def _init_hallucinated(self, embed_dims, num_heads, qkv_bias=True,
                           kernel_size=3, where='', form='auto'):
        check_even_heads(num_heads, where)
        self.hmhsa_form = check_hmhsa_form(form)
        if embed_dims % num_heads:
            raise ValueError(f'embed_dims {embed_dims} is not a multiple of '
                             f'num_heads {num_heads}')
        self.hmhsa_heads = num_heads
        self.hmhsa_head_dims = embed_dims // num_heads
        # Q^, K^: C -> C/2 (h/2 heads of C/h); V: C -> C (h heads)
        self.q = nn.Linear(embed_dims, embed_dims // 2, bias=qkv_bias)
        self.k = nn.Linear(embed_dims, embed_dims // 2, bias=qkv_bias)
        self.v = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.hallucination = AttentionHallucination(num_heads, kernel_size)

    def _project(self, x_q, x_kv):
        """``Q^, K^, V``; one stacked, cached product in eager inference."""
        if x_q is not x_kv or not eager_inference():
            return self.q(x_q), self.k(x_kv), self.v(x_kv)
        layers = (self.q, self.k, self.v)
        tensors = [t for m in layers for t in (m.weight, m.bias)
                   if t is not None]

        def stack():
            bias = None if self.q.bias is None else \
                torch.cat([m.bias for m in layers])
            return torch.cat([m.weight for m in layers]), bias

        weight, bias = weight_cache(self, '_qkv_cache', tensors, stack)
        out = F.linear(x_q, weight, bias)
        return out.split([m.out_features for m in layers], dim=-1)

    def _attend(self, x_q, x_kv, grid, num_extra=0, scale=None, bias=None,
                mask=None, dropout_p=0.0):
        """``softmax([A_r; CHH(IHH(A_r))] + bias + mask) V``, ``(B, N_q, C)``.

        Args:
            x_q (Tensor): Query tokens ``(B, N_q, C)``.
            x_kv (Tensor): Key/value tokens ``(B, num_extra + H_k W_k, C)``.
            grid (tuple[int, int]): Key grid ``(H_k, W_k)``.
            num_extra (int): Leading non-grid keys (class token).
            scale (float, optional): Logit scale, ``(C/h) ** -0.5`` default.
            bias (Tensor, optional): ``(h, N_q, N_k)``, added to all maps.
            mask (Tensor, optional): Additive, to ``(B, h, N_q, N_k)``.
            dropout_p (float): Attention dropout.
        """
        B, Nq, _ = x_q.shape
        Nk = x_kv.shape[1]
        h, d = self.hmhsa_heads, self.hmhsa_head_dims
        q, k, v = self._project(x_q, x_kv)
        q = q.reshape(B, Nq, h // 2, d).transpose(1, 2)
        k = k.reshape(B, Nk, h // 2, d).transpose(1, 2)
        v = v.reshape(B, Nk, h, d).transpose(1, 2)
        out = hallucinated_attention(q, k, v, self.hallucination, grid,
                                     num_extra, scale, bias, mask, dropout_p,
                                     self.hmhsa_form)
        return out.transpose(1, 2).reshape(B, Nq, h * d)


class HallucinatedMultiheadAttention(HallucinatedAttentionMixin, nn.Module):
    """hMHSA for a ViT/DeiT layer, shaped like mmpretrain's
    ``MultiheadAttention`` (``proj``, ``gamma1``, drop path kept).

    Args:
        embed_dims (int): ``C``.
        num_heads (int): ``h``, even.
        attn_drop (float): Attention dropout.
        proj_drop (float): Dropout after ``proj``.
        dropout_layer (dict): Drop path config of the residual branch.
        qkv_bias (bool): Biases on ``q``, ``k``, ``v``.
        proj_bias (bool): Bias on ``proj``.
        layer_scale_init_value (float): Layer scale (0: none).
        num_extra_tokens (int): Leading non-grid tokens (class token).
        kernel_size (int): IHH filter side.
        hmhsa_form (str): ``'explicit'``, ``'fused'``, ``'stacked'`` or
            ``'auto'`` (:func:`~mmvitaccel.ops.hmhsa.hallucinated_attention`).
    """

    def __init__(self,
                 embed_dims,
                 num_heads,
                 attn_drop=0.,
                 proj_drop=0.,
                 dropout_layer=dict(type='Dropout', drop_prob=0.),
                 qkv_bias=True,
                 proj_bias=True,
                 layer_scale_init_value=0.,
                 num_extra_tokens=1,
                 kernel_size=3,
                 hmhsa_form='auto'):
        super().__init__()
        self._init_hallucinated(embed_dims, num_heads, qkv_bias, kernel_size,
                                form=hmhsa_form)
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.num_extra_tokens = num_extra_tokens
        self.attn_drop = attn_drop
        self.proj = nn.Linear(embed_dims, embed_dims, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop)
        self.out_drop = build_dropout(dropout_layer)
        self.gamma1 = LayerScale(embed_dims, layer_scale_init_value) \
            if layer_scale_init_value > 0 else nn.Identity()

    def forward(self, x, hw_shape=None):
        """Args:
            x (Tensor): ``(B, num_extra + H * W, C)``.
            hw_shape (tuple[int, int], optional): Patch grid (default square).

        Returns:
            Tensor: ``(B, N, C)``, the residual branch (no shortcut).
        """
        grid = hw_shape or square_grid(x.shape[1] - self.num_extra_tokens)
        drop = self.attn_drop if self.training else 0.
        x = self._attend(x, x, tuple(grid), self.num_extra_tokens,
                         dropout_p=drop)
        return self.out_drop(self.gamma1(self.proj_drop(self.proj(x))))


class HViTEncoderLayer(TransformerEncoderLayer):
    """mmpretrain's ViT encoder layer with hMHSA and/or cFFN (neither: the
    upstream layer); ``forward`` takes the patch grid for IHH.

    Args:
        hmhsa (bool): Use :class:`HallucinatedMultiheadAttention`.
        cffn (bool): Factor the FFN's second linear (``ffn.layers.1``).
        cffn_ratio (float): ``t``.
        cffn_branches (int): ``r``.
        deploy (bool): Build cFFN in the folded (inference) form.
        num_extra_tokens (int): Leading non-grid tokens (class token).
        ihh_kernel (int): IHH filter side.
        hmhsa_form (str): ``'explicit'``, ``'fused'``, ``'stacked'`` or
            ``'auto'`` (:func:`~mmvitaccel.ops.hmhsa.hallucinated_attention`).
        **kwargs: Arguments of mmpretrain's ``TransformerEncoderLayer``.
    """

    def __init__(self,
                 hmhsa=True,
                 cffn=True,
                 cffn_ratio=0.5,
                 cffn_branches=2,
                 deploy=False,
                 num_extra_tokens=1,
                 ihh_kernel=3,
                 hmhsa_form='auto',
                 **kwargs):
        super().__init__(**kwargs)
        self.hmhsa = hmhsa
        if hmhsa:
            old = self.attn
            self.attn = HallucinatedMultiheadAttention(
                embed_dims=self.embed_dims,
                num_heads=kwargs['num_heads'],
                attn_drop=kwargs.get('attn_drop_rate', 0.),
                proj_drop=kwargs.get('drop_rate', 0.),
                dropout_layer=dict(
                    type='DropPath',
                    drop_prob=kwargs.get('drop_path_rate', 0.)),
                qkv_bias=kwargs.get('qkv_bias', True),
                proj_bias=old.proj.bias is not None,
                layer_scale_init_value=kwargs.get('layer_scale_init_value',
                                                  0.),
                num_extra_tokens=num_extra_tokens,
                kernel_size=ihh_kernel,
                hmhsa_form=hmhsa_form)
        if cffn:
            compact_ffn(self.ffn, cffn_ratio, cffn_branches, deploy)

    def forward(self, x, hw_shape=None):
        """Args:
            x (Tensor): ``(B, N, C)``.
            hw_shape (tuple[int, int], optional): Patch grid for hMHSA.

        Returns:
            Tensor: ``(B, N, C)``.
        """
        attn = self.attn(self.ln1(x), hw_shape) if self.hmhsa else \
            self.attn(self.ln1(x))
        x = x + attn
        return self.ffn(self.ln2(x), identity=x)


class HallucinatedWindowMSA(HallucinatedAttentionMixin, WindowMSA):
    """hMHSA inside Swin's window attention (mmpretrain's ``WindowMSA``).

    IHH's key grid is the ``w x w`` window; the relative position bias and
    the shift mask are added to all ``h`` maps after the hallucination.

    Args:
        embed_dims (int): ``C``.
        window_size (tuple[int, int]): ``(w, w)``.
        num_heads (int): ``h``, even.
        qkv_bias (bool): Biases on ``q``, ``k``, ``v``.
        qk_scale (float, optional): Logit scale override.
        attn_drop (float): Attention dropout.
        proj_drop (float): Dropout after ``proj``.
        kernel_size (int): IHH filter side.
        hmhsa_form (str): ``'explicit'``, ``'fused'``, ``'stacked'`` or
            ``'auto'`` (:func:`~mmvitaccel.ops.hmhsa.hallucinated_attention`).
        init_cfg (dict, optional): Init config.
    """

    def __init__(self,
                 embed_dims,
                 window_size,
                 num_heads,
                 qkv_bias=True,
                 qk_scale=None,
                 attn_drop=0.,
                 proj_drop=0.,
                 kernel_size=3,
                 init_cfg=None,
                 hmhsa_form='auto'):
        super().__init__(embed_dims, window_size, num_heads, qkv_bias,
                         qk_scale, attn_drop, proj_drop, init_cfg)
        del self.qkv
        self._init_hallucinated(embed_dims, num_heads, qkv_bias, kernel_size,
                                form=hmhsa_form)

    def forward(self, x, mask=None):
        """Args:
            x (Tensor): ``(B * nW, w * w, C)`` window tokens.
            mask (Tensor, optional): ``(nW, w*w, w*w)``, bool or additive.

        Returns:
            Tensor: ``(B * nW, w * w, C)``.
        """
        Bw, N, C = x.shape
        Wh, Ww = self.window_size
        bias = relative_position_bias(self.relative_position_bias_table,
                                      self.relative_position_index)
        if mask is not None:
            # -100 offsets as allowed/forbidden: weight 0, not subnormal
            if mask.dtype != torch.bool:
                mask = mask >= 0
            # window b * nW + w of the batch uses mask[w]: (B * nW, 1, N, N)
            mask = window_mask(mask, Bw)
        out = self._attend(x, x, (Wh, Ww), 0, self.scale, bias, mask,
                           self.attn_drop.p if self.training else 0.)
        return self.proj_drop(self.proj(out))


def is_hallucinated(module):
    """Whether ``module`` is one of the hMHSA attentions above."""
    return isinstance(module, HallucinatedAttentionMixin)


def resolve_hmhsa_stages(hmhsa, num_heads):
    """Which stages of a pyramid get hMHSA.

    Args:
        hmhsa (bool | Sequence[int]): ``True``: every even-head stage;
            ``False``: none; or these 0-based stages (even heads).
        num_heads (Sequence[int]): Heads of each stage.

    Returns:
        tuple[int]: Sorted stage indices.
    """
    if hmhsa is True:
        return tuple(i for i, h in enumerate(num_heads) if h % 2 == 0)
    if hmhsa is False or hmhsa is None:
        return ()
    stages = tuple(sorted(set(int(i) for i in hmhsa)))
    for i in stages:
        if not 0 <= i < len(num_heads):
            raise ValueError(f'hmhsa stage {i} does not exist (stages 0..'
                             f'{len(num_heads) - 1})')
        check_even_heads(num_heads[i], f'stage {i}')
    return stages
