"""hMHSA's fused and stacked forms, IHH on the keys: ``IHH_j(A_j) = s Q_j
K'_j^T``, ``K'_j = conv_grid(K_j; w_j)``, ``A_h,i = sum_j c_ij s Q_j K'_j^T``;
masks only as region masks (``docs/hmhsa_cffn_design.md#forms``)."""
import warnings

import torch
import torch.nn.functional as F

from mmvitaccel.ops.attention import (additive_mask, attention_logits,
                                      mask_logits, masked_softmax)
from mmvitaccel.ops.inference_cache import eager_inference

__all__ = [
    'hallucinated_keys', 'key_side_mask', 'key_filter_operator',
    'sparse_filter_applies', 'cross_head_mix', 'fused_hallucinated_attention',
    'stacked_hallucinated_attention', 'maps_times_values'
]


def _grid_neighbours(grid, kernel_size, device):
    """Neighbour index ``(k^2, H W)`` of each grid key per tap (unfold order),
    and whether it lies inside the grid."""
    Hk, Wk = grid
    r = kernel_size // 2
    ys = torch.arange(Hk, device=device).view(1, Hk, 1)
    xs = torch.arange(Wk, device=device).view(1, 1, Wk)
    offs = torch.arange(-r, r + 1, device=device)
    dy = offs.repeat_interleave(kernel_size).view(-1, 1, 1)
    dx = offs.repeat(kernel_size).view(-1, 1, 1)
    ny, nx = ys + dy, xs + dx
    inside = (ny >= 0) & (ny < Hk) & (nx >= 0) & (nx < Wk)
    index = (ny.clamp(0, Hk - 1) * Wk + nx.clamp(0, Wk - 1))
    return index.flatten(1), inside.flatten(1)


def _allowed(mask):
    """A mask as bool, True where a key may be attended."""
    return mask if mask.dtype == torch.bool else mask >= 0


def key_filter_operator(weight, grid, num_extra=0):
    """IHH on the keys as one sparse matrix, ``K' = M K`` for all ``g`` maps.

    ``M`` is block-diagonal ``(g N_k, g N_k)``: row ``p`` of block ``j``
    holds ``w_j`` at key ``p``'s in-grid neighbours; an off-grid key's row
    the centre tap.

    Args:
        weight (Tensor): The ``g`` filters ``(g, 1, k, k)``.
        grid (tuple[int, int]): ``(H_k, W_k)``.
        num_extra (int): Leading non-grid keys.

    Returns:
        Tensor: ``M``, sparse CSR ``(g N_k, g N_k)``, ``weight``'s dtype.
    """
    G, ks = weight.shape[0], weight.shape[-1]
    Hk, Wk = grid
    Nk = num_extra + Hk * Wk
    dev = weight.device
    index, inside = _grid_neighbours(grid, ks, dev)  # (k^2, H W)
    tap, key = inside.nonzero(as_tuple=True)
    rows = [key + num_extra]
    cols = [index[tap, key] + num_extra]
    taps = [tap]
    extra = torch.arange(num_extra, device=dev)
    rows.append(extra)
    cols.append(extra)
    taps.append(torch.full_like(extra, ks * ks // 2))
    rows, cols, taps = (torch.cat(t) for t in (rows, cols, taps))
    base = (torch.arange(G, device=dev) * Nk).view(G, 1)
    values = weight.reshape(G, ks * ks)[:, taps]  # (g, nnz)
    indices = torch.stack(((base + rows).flatten(), (base + cols).flatten()))
    op = torch.sparse_coo_tensor(indices, values.flatten(),
                                 (G * Nk, G * Nk),
                                 check_invariants=True).coalesce()
    with warnings.catch_warnings():  # torch: "sparse CSR ... beta state"
        warnings.simplefilter('ignore', UserWarning)
        return op.to_sparse_csr()


def sparse_filter_applies(x):
    """Whether IHH may run as a sparse product on ``x``: eager inference,
    CPU, float32/float64.

    Args:
        x (Tensor): The keys or maps to filter.

    Returns:
        bool
    """
    return x.device.type == 'cpu' and \
        x.dtype in (torch.float32, torch.float64) and eager_inference()


def key_side_mask(mask, n_kv, num_extra=0):
    """Whether the key-side forms take ``mask``: None, or a region mask
    ``(B or 1, 1, N_k, N_k)`` / ``(N_k, N_k)`` with no off-grid key.

    Args:
        mask (Tensor, optional): The attention mask.
        n_kv (int): Keys.
        num_extra (int): Leading non-grid keys.

    Returns:
        bool
    """
    if mask is None:
        return True
    return not num_extra and mask.shape[-2:] == (n_kv, n_kv) and \
        (mask.dim() < 4 or mask.shape[1] == 1)


def hallucinated_keys(k, ihh, grid, num_extra=0, mask=None):
    """``K'_j = conv_grid(K_j; w_j)``: IHH moved from the maps to the keys.

    Args:
        k (Tensor): ``K^`` ``(B, g, N_k, d)``, grid keys in raster order.
        ihh (IntraHeadHallucination): holds the ``g`` filters.
        grid (tuple[int, int]): ``(H_k, W_k)``.
        num_extra (int): Leading non-grid keys (centre tap only).
        mask (Tensor, optional): region mask ``(B or 1, 1, N_k, N_k)``; a
            neighbour that row ``p`` forbids is left out of ``K'[p]``.

    Returns:
        Tensor: ``K'`` ``(B, g, N_k, d)``.
    """
    B, G, Nk, d = k.shape
    Hk, Wk = grid
    weight = ihh.conv.weight  # (g, 1, k, k)
    # the module's int: torch < 2.2's tracer hands sizes on as tensors
    ks = ihh.conv.kernel_size[-1]
    if G != ihh.num_maps or Nk != num_extra + Hk * Wk:
        raise ValueError(f'IHH expects keys (B, {ihh.num_maps}, {num_extra} '
                         f'+ {Hk}*{Wk}, d), got {tuple(k.shape)}')
    if mask is None and B == 1 and sparse_filter_applies(k):
        # one sparse product at batch 1 (key_filter_operator)
        op = ihh.key_operator(grid, num_extra, k.dtype)
        return torch.sparse.mm(op, k[0].reshape(G * Nk, d)).view(1, G, Nk, d)
    # (B, g, H W, d) -> (B, g d, H, W): every channel of map j gets w_j
    keys = k[:, :, num_extra:].transpose(2, 3).reshape(B, G * d, Hk, Wk)
    if mask is None:
        out = F.conv2d(keys, weight.repeat_interleave(d, 0),
                       padding=ks // 2, groups=G * d)
        out = out.reshape(B, G, d, Hk * Wk)
    else:
        if not key_side_mask(mask, Nk, num_extra):
            raise ValueError(
                'the key-side hMHSA forms (fused, stacked) take a mask only '
                'as a region mask '
                f'over the key grid, (B, 1, {Nk}, {Nk}) without extra keys; '
                f'got {tuple(mask.shape)} with num_extra={num_extra} '
                "(use form='explicit')")
        index, inside = _grid_neighbours(grid, ks, k.device)
        rows = torch.arange(Nk, device=k.device)
        # gate[b, t, p]: key p sees its neighbour p + t (row p of the mask)
        gate = _allowed(mask)[..., rows, index] & inside
        coef = gate.reshape(-1, 1, ks * ks, Nk).to(k.dtype) * \
            weight.reshape(1, G, ks * ks, 1)
        # the k^2 shifted copies of the zero-padded grid (what unfold gives)
        padded = F.pad(keys, (ks // 2, ) * 4)
        taps = torch.stack([
            padded[..., i:i + Hk, j:j + Wk] for i in range(ks)
            for j in range(ks)
        ], dim=2).reshape(B, G, d, ks * ks, Nk)
        out = torch.einsum('bgdtn,bgtn->bgdn', taps, coef)
    out = out.transpose(2, 3)
    if not num_extra:
        return out
    centre = weight[:, 0, ks // 2, ks // 2].view(1, G, 1, 1)
    return torch.cat((k[:, :, :num_extra] * centre, out), dim=2)


def _logit_mask(bias, mask, dtype):
    """``bias + mask`` as one SDPA ``attn_mask`` (None, bool or float)."""
    if mask is not None and mask.dtype == torch.bool:
        if bias is None:
            return mask  # SDPA: True where allowed, as ours
        mask = additive_mask(mask, dtype)
    if bias is None:
        return None if mask is None else mask.to(dtype)
    return bias.to(dtype) if mask is None else bias.to(dtype) + mask


def _split_heads(attn_mask, g):
    """Real and hallucinated heads' parts of a ``(.., h|1, .., ..)`` mask."""
    if attn_mask is None or attn_mask.dim() < 3 or attn_mask.shape[-3] == 1:
        return attn_mask, attn_mask
    return attn_mask[..., :g, :, :], attn_mask[..., g:, :, :]


def fused_hallucinated_attention(q, k, v, hallucination, grid, num_extra=0,
                                 scale=None, bias=None, mask=None,
                                 dropout_p=0.0):
    """hMHSA, IHH on the keys, the real heads (and all at ``g = 1``) in SDPA.

    Args and Returns: as :func:`~mmvitaccel.ops.hmhsa.hallucinated_attention`.
    """
    B, G, Nq, d = q.shape
    if scale is None:
        scale = d**-0.5
    kh = hallucinated_keys(k, hallucination.ihh, grid, num_extra, mask)
    c = hallucination.chh.conv.weight.view(G, G)
    m_real, m_hall = _split_heads(_logit_mask(bias, mask, q.dtype), G)
    real = F.scaled_dot_product_attention(
        q, k, v[:, :G], attn_mask=m_real, dropout_p=dropout_p, scale=scale)
    if G == 1:  # CHH is one factor: folded into the query, fused kernel
        hall = F.scaled_dot_product_attention(
            q * (c * scale), kh, v[:, G:], attn_mask=m_hall,
            dropout_p=dropout_p, scale=1.0)
    else:
        # IHH_j(A_j) = s Q_j K'_j^T, then CHH mixes the g maps
        logits = cross_head_mix(c, attention_logits(q, kh, scale))
        if m_hall is not None:
            logits = mask_logits(logits, m_hall)
        attn = logits.softmax(dim=-1)
        if dropout_p:
            attn = F.dropout(attn, p=dropout_p)
        hall = attn @ v[:, G:]
    # (B, N_q, h, d) in memory: the caller's token layout is then a view
    return torch.cat((real.transpose(1, 2), hall.transpose(1, 2)),
                     dim=2).transpose(1, 2)


def stacked_hallucinated_attention(q, k, v, hallucination, grid,
                                   num_extra=0, scale=None, bias=None,
                                   mask=None, dropout_p=0.0):
    """hMHSA, IHH on the keys, ``s Q_j [K_j; K'_j]^T`` and one softmax.

    Args and Returns: as :func:`~mmvitaccel.ops.hmhsa.hallucinated_attention`.
    """
    Nk = k.shape[2]
    if scale is None:
        scale = q.shape[-1]**-0.5
    kh = hallucinated_keys(k, hallucination.ihh, grid, num_extra, mask)
    # [A_r, IHH(A_r)] (B, g, N_q, 2 N_k)
    scores = attention_logits(q, torch.cat((k, kh), dim=2), scale)
    c = hallucination.chh.conv.weight.view(q.shape[1], q.shape[1])
    # A = [A_r; CHH(IHH(A_r))] (B, h, N_q, N_k)
    attn = torch.cat((scores[..., :Nk], cross_head_mix(c, scores[..., Nk:])),
                     dim=1)
    return maps_times_values(attn, v, bias, mask, dropout_p)


def maps_times_values(attn, v, bias=None, mask=None, dropout_p=0.0):
    """``softmax(A + bias + mask) V`` over all ``h`` maps.

    Args:
        attn (Tensor): pre-softmax maps ``A`` ``(B, h, N_q, N_k)``.
        v (Tensor): ``(B, h, N_k, d_v)``.
        bias (Tensor, optional): broadcastable to ``attn``.
        mask (Tensor, optional): bool (True where allowed) or additive.
        dropout_p (float): attention dropout.

    Returns:
        Tensor: ``(B, h, N_q, d_v)``.
    """
    if bias is not None:
        attn = attn + bias
    attn = masked_softmax(attn, mask)
    if dropout_p:
        attn = F.dropout(attn, p=dropout_p)
    return attn @ v


def cross_head_mix(weight, maps):
    """CHH, ``sum_j c_ij maps_j``, as one batched product.

    Args:
        weight (Tensor): ``c`` ``(g, g)``.
        maps (Tensor): ``(B, g, N_q, N_k)``.

    Returns:
        Tensor: ``(B, g, N_q, N_k)``.
    """
    B, G = maps.shape[:2]
    flat = maps.reshape(B, G, -1)
    return torch.bmm(weight.expand(B, G, G), flat).view(maps.shape)
