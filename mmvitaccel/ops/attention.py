"""Shared pieces of softmax attention: :data:`MASKED_LOGIT` and the masks
that apply it, :func:`sdpa_mask`, attention logits and probabilities,
:func:`window_mask`, and Swin's relative position bias.

Why ``-1e4`` and not ``-inf`` or ``-65000``: ``docs/architecture.md``,
"ops/attention.py".
"""
import torch

from mmvitaccel.ops.tracing import is_capturing

__all__ = [
    'MASKED_LOGIT', 'additive_mask', 'sdpa_mask', 'mask_logits',
    'masked_softmax', 'attention_logits', 'attention_probs', 'window_mask',
    'relative_position_index', 'relative_position_bias'
]

#: logit offset of a forbidden key: finite in float16, ``exp`` of it is 0
MASKED_LOGIT = -1e4


def additive_mask(allowed, dtype=torch.float32):
    """A bool mask as an additive one: 0 where allowed, else
    :data:`MASKED_LOGIT`.

    Args:
        allowed (Tensor): bool, any shape, True where a key may be attended.
        dtype (torch.dtype): dtype of the result.

    Returns:
        Tensor: same shape as ``allowed``, ``dtype``.
    """
    if allowed.dtype != torch.bool:
        raise TypeError(f'allowed must be a bool tensor, got {allowed.dtype}')
    return torch.zeros(allowed.shape, dtype=dtype,
                       device=allowed.device).masked_fill(~allowed,
                                                          MASKED_LOGIT)


def sdpa_mask(valid, dtype):
    """``attn_mask`` of ``scaled_dot_product_attention`` for a bool key mask:
    ``valid`` in eager mode, :func:`additive_mask` of it under graph capture
    (no ``IsNaN`` pass in ONNX; ``docs/deployment.md``).

    Args:
        valid (Tensor | None): bool, True where a key may be attended,
            broadcastable to the logits.
        dtype (torch.dtype): the logits' dtype.

    Returns:
        Tensor | None: ``valid``, its additive form, or None for None.
    """
    if valid is None or not is_capturing():
        return valid
    return additive_mask(valid, dtype)


def mask_logits(logits, mask=None):
    """Apply a mask to attention logits.

    Args:
        logits (Tensor): ``(..., N_q, N_k)``.
        mask (Tensor, optional): broadcastable; bool (True where allowed)
            or additive (e.g. Swin's shift mask). None: no mask.

    Returns:
        Tensor: the masked logits, the broadcast shape.
    """
    if mask is None:
        return logits
    if mask.dtype == torch.bool:
        return logits + (~mask).to(logits.dtype) * MASKED_LOGIT
    return logits + mask.to(logits.dtype)


def masked_softmax(logits, mask=None, dim=-1):
    """``softmax(logits + mask)`` over ``dim`` (:func:`mask_logits`).

    Args:
        logits (Tensor): ``(..., N_q, N_k)``.
        mask (Tensor, optional): bool (True where allowed) or additive,
            broadcastable to ``logits``.
        dim (int): the key axis.

    Returns:
        Tensor: probabilities; a masked key gets exactly 0 if its row has
        an allowed key.
    """
    return mask_logits(logits, mask).softmax(dim=dim)


def attention_logits(q, k, scale):
    """Scaled dot products ``(q * scale) k^T``, the query scaled first (as
    in mmpretrain's and mmdet's window attention).

    Args:
        q (Tensor): queries ``(..., N_q, d)``.
        k (Tensor): keys ``(..., N_k, d)``.
        scale (float): usually ``d ** -0.5``.

    Returns:
        Tensor: ``(..., N_q, N_k)``.
    """
    return (q * scale) @ k.transpose(-2, -1)


def attention_probs(q, k, scale, bias=None, mask=None):
    """Attention maps ``softmax((q * scale) k^T + bias + mask)`` over keys.

    Args:
        q (Tensor): queries ``(B, h, N_q, d)``.
        k (Tensor): keys ``(B, h, N_k, d)``.
        scale (float): the logit scale.
        bias (Tensor, optional): broadcastable to ``(B, h, N_q, N_k)``, e.g.
            a relative position bias ``(h, N_q, N_k)``.
        mask (Tensor, optional): bool (True where allowed) or additive,
            broadcastable to ``(B, h, N_q, N_k)``.

    Returns:
        Tensor: ``(B, h, N_q, N_k)``, rows summing to 1.
    """
    logits = attention_logits(q, k, scale)
    if bias is not None:
        logits = logits + bias
    return masked_softmax(logits, mask)


def window_mask(mask, batch_windows):
    """A per-window mask ``(nW, N_q, N_k)`` over ``B * nW`` windows (one
    image's windows consecutive): window ``b * nW + w`` gets ``mask[w]``.

    Args:
        mask (Tensor): ``(nW, N_q, N_k)``, bool or additive.
        batch_windows (int): ``B * nW``.

    Returns:
        Tensor: ``(B * nW, 1, N_q, N_k)``, to broadcast over heads.
    """
    nW = mask.shape[0]
    if batch_windows % nW:
        raise ValueError(f'{batch_windows} windows are not a multiple of the '
                         f"mask's {nW} windows")
    return mask.repeat(batch_windows // nW, 1, 1)[:, None]


def relative_position_index(window):
    """Swin's relative position index of a ``Wh x Ww`` window.

    ``(i, j) -> (dy + Wh - 1) * (2 Ww - 1) + (dx + Ww - 1)``,
    ``(dy, dx) = p_i - p_j``; equals mmpretrain's ``WindowMSA`` buffer.

    Args:
        window (int | tuple[int, int]): ``w`` or ``(Wh, Ww)``.

    Returns:
        Tensor: ``(Wh * Ww, Wh * Ww)`` long.
    """
    Wh, Ww = (window, window) if isinstance(window, int) else window
    ys, xs = torch.meshgrid(torch.arange(Wh), torch.arange(Ww),
                            indexing='ij')
    ys, xs = ys.flatten(), xs.flatten()
    dy = ys[:, None] - ys[None, :] + Wh - 1
    dx = xs[:, None] - xs[None, :] + Ww - 1
    return (dy * (2 * Ww - 1) + dx).contiguous()


def relative_position_bias(table, index):
    """Gather the relative position bias of every (query, key) pair.

    Args:
        table (Tensor): ``((2 Wh - 1) (2 Ww - 1), h)``, one row per offset.
        index (Tensor): ``(N_q, N_k)`` long rows of ``table``
            (:func:`relative_position_index`).

    Returns:
        Tensor: ``(h, N_q, N_k)``, contiguous.
    """
    Nq, Nk = index.shape
    bias = table[index.reshape(-1)].view(Nq, Nk, -1)
    return bias.permute(2, 0, 1).contiguous()
