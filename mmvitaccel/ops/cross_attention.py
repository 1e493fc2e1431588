"""Attention across token sets (STViT's STGM, semantic and recovery layers)
with a host block's fused ``qkv``: rows ``[:C]`` queries, ``[C:]`` keys and
values, so a pretrained checkpoint initialises them unchanged.
"""
import torch.nn.functional as F

from mmvitaccel.ops.attention import sdpa_mask

__all__ = ['cross_attention', 'project_key_values']


def _key_mask(key_valid, batch_windows, dtype):
    """Key mask for SDPA, contiguous (strided masks take the slow CPU path)."""
    if key_valid is None:
        return None
    if key_valid.dim() == 3:
        return sdpa_mask(key_valid.contiguous()[:, None], dtype)
    if key_valid.shape[0] != batch_windows:
        key_valid = key_valid.repeat(batch_windows // key_valid.shape[0], 1)
    return sdpa_mask(key_valid.contiguous()[:, None, None, :], dtype)


def project_key_values(tokens, norm, qkv):
    """Keys and values ``W_kv LN(tokens)``, rows ``[C:]`` of ``qkv``.

    Args:
        tokens (Tensor): ``(..., C)``.
        norm (nn.Module): the block's first LayerNorm.
        qkv (nn.Linear): the fused ``C -> 3C`` projection.

    Returns:
        Tensor: ``(..., 2C)``, keys then values.
    """
    C = tokens.shape[-1]
    return F.linear(
        norm(tokens), qkv.weight[C:],
        None if qkv.bias is None else qkv.bias[C:])


def cross_attention(queries, kv, qkv, num_heads, scale, dropout_p=0.,
                    key_valid=None):
    """``softmax(q k^T * scale + mask) v`` with ``q = W_q queries`` (rows
    ``[:C]`` of ``qkv``).

    Args:
        queries (Tensor): normalised queries ``(N, Lq, C)``.
        kv (Tensor): projected keys and values ``(N, Lk, 2C)``.
        qkv (nn.Linear): the fused ``C -> 3C`` projection.
        num_heads (int): attention heads.
        scale (float): logit scale, usually ``head_dim ** -0.5``.
        dropout_p (float): attention dropout (0 in eval).
        key_valid (Tensor, optional): bool ``(N, Lk)``, ``(nW, Lk)`` or
            ``(1, Lq, Lk)``; every query needs a valid key.

    Returns:
        Tensor: ``(N, Lq, C)`` before the output projection.
    """
    N, Lq, C = queries.shape
    Lk = kv.shape[1]
    q = F.linear(queries, qkv.weight[:C],
                 None if qkv.bias is None else qkv.bias[:C])
    q = q.view(N, Lq, num_heads, C // num_heads).transpose(1, 2)
    k, v = kv.view(N, Lk, 2, num_heads, C // num_heads).permute(2, 0, 3, 1, 4)
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=_key_mask(key_valid, N, q.dtype),
        dropout_p=dropout_p, scale=scale)
    return out.transpose(1, 2).reshape(N, Lq, C)
