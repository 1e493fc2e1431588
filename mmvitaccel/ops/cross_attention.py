"""Attention across token sets with a fused ``qkv`` projection.

STViT's STGM, semantic and recovery layers are transformer layers whose
queries and keys come from different token sets (image tokens, cluster
centres, semantic tokens). They keep a host block's fused ``qkv``
(``C -> 3C``): rows ``[:C]`` project the queries, rows ``[C:]`` the keys
and values, so a pretrained checkpoint initialises them unchanged.

Plain torch: no registry, no OpenMMLab imports.
"""
import torch.nn.functional as F

from mmvitaccel.ops.attention import sdpa_mask

__all__ = ['cross_attention', 'project_key_values']


def _key_mask(key_valid, batch_windows, dtype):
    """``(nW|N, Lk)`` bool -> ``(N, 1, 1, Lk)`` for SDPA (True = attend);
    a per-query mask ``(1, Lq, Lk)``, shared by the batch, becomes
    ``(1, 1, Lq, Lk)``; additive (``dtype``) under graph capture
    (:func:`~mmvitaccel.ops.sdpa_mask`).

    The mask is made contiguous: torch's fused CPU attention kernel falls
    back to the (several times slower) math path for strided masks.
    """
    if key_valid is None:
        return None
    if key_valid.dim() == 3:
        return sdpa_mask(key_valid.contiguous()[:, None], dtype)
    if key_valid.shape[0] != batch_windows:
        key_valid = key_valid.repeat(batch_windows // key_valid.shape[0], 1)
    return sdpa_mask(key_valid.contiguous()[:, None, None, :], dtype)


def project_key_values(tokens, norm, qkv):
    """Keys and values of tokens with a fused projection:
    ``W_kv LN(tokens)``, rows ``[C:]`` of ``qkv``.

    Projecting a whole map once and then gathering windows from it is the
    same as projecting every gathered window (LN and the projection act per
    token), and much cheaper when windows overlap.

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
    """``softmax(q k^T * scale + mask) v`` with ``q = W_q queries``.

    The query projection is rows ``[:C]`` of the fused ``qkv`` layer, so
    the keys/values from :func:`project_key_values` and the queries come
    from one Swin ``qkv`` exactly as its self-attention would.

    Args:
        queries (Tensor): normalised queries ``(N, Lq, C)``.
        kv (Tensor): projected keys and values ``(N, Lk, 2C)``.
        qkv (nn.Linear): the fused ``C -> 3C`` projection.
        num_heads (int): attention heads.
        scale (float): logit scale, usually ``head_dim ** -0.5``.
        dropout_p (float): attention dropout (0 in eval).
        key_valid (Tensor, optional): ``(N, Lk)`` or per-window ``(nW, Lk)``
            bool, or ``(1, Lq, Lk)`` per query (shared by the batch); False
            keys get no attention. Every query needs at least one valid
            key.

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
