"""The pieces of softmax attention that several methods share.

* :data:`MASKED_LOGIT`, the one logit offset given to a key that a mask
  forbids, and :func:`mask_logits` / :func:`additive_mask` /
  :func:`masked_softmax`, which apply it;
* :func:`sdpa_mask`, the key mask handed to
  ``scaled_dot_product_attention``: bool in eager mode, additive under
  graph capture (the exported graph then has no extra pass over the map);
* :func:`attention_logits` and :func:`attention_probs`, the attention maps
  ``softmax(q k^T * scale + bias + mask)`` that the probes (DGSSA's
  dynamic-guided init, the token scorers of SaiT and AS-ViT) read and the
  layers that need the maps themselves compute;
* :func:`window_mask`, a per-window mask ``(nW, N, N)`` laid over a batch of
  ``B * nW`` windows;
* :func:`relative_position_index` and :func:`relative_position_bias`, Swin's
  relative position bias gathered from its table.

Why a finite :data:`MASKED_LOGIT` and not ``-inf``: ``-inf`` turns a row with
no allowed key into ``NaN`` (``exp(-inf - (-inf))``), and a large float32
constant such as ``-65000`` overflows to ``-inf`` in float16 once a logit
below about ``-500`` is added to it. ``-1e4`` stays finite in float16
(whose largest magnitude is 65504) after any realistic logit is added, and
``exp(-1e4 + l - max)`` is exactly 0 in float16, float32 and float64 as long
as the allowed logits of a row span less than about ``1e4 - 104``, so that
a masked key gets exactly no weight whenever its row has an allowed key.
A row whose keys are all masked gets the same offset on every logit and so
the softmax of its unmasked logits (softmax ignores a constant shift):
finite, and meaningless, so callers drop such rows (padding queries).

``-inf`` stays where it is truly needed, outside softmax logits: as the
bottom of a max or an argmax/sort over *scores* (``amax`` of the visible
logits in :func:`~mmvitaccel.ops.token_pruning.masked_attention`'s policy
mode, ``topk_keep_mask``, ``threshold_keep_mask``, STViT's max pooling),
where a finite value could win against real scores.

Plain torch: no registry, no OpenMMLab imports.
"""
import torch

from mmvitaccel.ops.tracing import is_capturing

__all__ = [
    'MASKED_LOGIT', 'additive_mask', 'sdpa_mask', 'mask_logits',
    'masked_softmax', 'attention_logits', 'attention_probs', 'window_mask',
    'relative_position_index', 'relative_position_bias'
]

#: the logit offset of a key that a mask forbids (see the module's notes:
#: finite for float16, and ``exp`` of it is exactly 0 beside any allowed key)
MASKED_LOGIT = -1e4


def additive_mask(allowed, dtype=torch.float32):
    """A bool mask as an additive one: 0 where allowed, :data:`MASKED_LOGIT`
    where not.

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
    """The ``attn_mask`` of ``scaled_dot_product_attention`` for a bool
    key mask: ``valid`` itself in eager mode, :func:`additive_mask` of it
    under graph capture (:func:`~mmvitaccel.ops.is_capturing`).

    Both give the same attention whenever a query has a valid key (a
    masked key's weight is exactly 0 either way, module notes). They
    differ in what a deployed runtime runs: ONNX has no masked softmax, so
    the exporter writes a bool mask as ``Where(valid, 0, lowest)`` added to
    the logits followed by an ``IsNaN``/``Where`` pass over the whole
    attention map, while an additive mask is a single ``Add``. On STViT-R's
    padded windows at 800x1333 that pass took about a tenth of
    onnxruntime's time (docs/deployment.md).

    Args:
        valid (Tensor | None): bool, True where a key may be attended, any
            shape that broadcasts against the logits.
        dtype (torch.dtype): the logits' dtype.

    Returns:
        Tensor | None: ``valid`` (eager), its additive form (capture), or
        None for None.
    """
    if valid is None or not is_capturing():
        return valid
    return additive_mask(valid, dtype)


def mask_logits(logits, mask=None):
    """Apply a mask to attention logits.

    Args:
        logits (Tensor): ``(..., N_q, N_k)``.
        mask (Tensor, optional): broadcastable to ``logits``; bool (True
            where allowed; forbidden keys get :data:`MASKED_LOGIT` added) or
            float (additive: 0 where allowed, negative where not, e.g. Swin's
            shift mask). None leaves the logits as they are.

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
        Tensor: probabilities, the broadcast shape; a masked key of a row
        with an allowed key gets exactly 0.
    """
    return mask_logits(logits, mask).softmax(dim=dim)


def attention_logits(q, k, scale):
    """Scaled dot products ``(q * scale) k^T``, the query scaled first (as
    mmpretrain's and mmdet's window attention do).

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
        bias (Tensor, optional): added to the logits, broadcastable to
            ``(B, h, N_q, N_k)`` (e.g. a relative position bias
            ``(h, N_q, N_k)``).
        mask (Tensor, optional): bool (True where allowed) or additive,
            broadcastable to ``(B, h, N_q, N_k)``; a per-window Swin mask
            goes through :func:`window_mask` first.

    Returns:
        Tensor: ``(B, h, N_q, N_k)``, rows summing to 1.
    """
    logits = attention_logits(q, k, scale)
    if bias is not None:
        logits = logits + bias
    return masked_softmax(logits, mask)


def window_mask(mask, batch_windows):
    """A per-window mask ``(nW, N_q, N_k)`` for a batch of ``B * nW``
    windows, the ``nW`` windows of one image consecutive (as
    ``window_partition`` orders them): window ``b * nW + w`` gets
    ``mask[w]``.

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

    Entry ``(i, j)`` is the row of the bias table for query ``i`` and key
    ``j`` (raster order): ``(dy + Wh - 1) * (2 Ww - 1) + (dx + Ww - 1)`` with
    ``(dy, dx) = p_i - p_j``. Equal to the ``relative_position_index``
    buffer of mmpretrain's and mmdet's ``WindowMSA``.

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
