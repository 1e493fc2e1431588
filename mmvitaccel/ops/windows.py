"""Swin-order windows of ``(B, H, W, C)`` maps, and validity masks (True
on real tokens, no batch axis); regions: ``docs/stvit_design.md`` 11, 13."""
import functools

import torch
import torch.nn.functional as F

from mmvitaccel.ops.checks import check_choice
from mmvitaccel.ops.tracing import is_capturing


def pad_to_multiple(x, multiple):
    """Pad a map on the bottom and right to a multiple of ``multiple``.

    Args:
        x (Tensor): map of shape ``(B, H, W, C)``.
        multiple (int): the window size.

    Returns:
        tuple[Tensor, Tensor]: map ``(B, Hp, Wp, C)``, mask ``(Hp, Wp)``.
    """
    if multiple < 1:
        raise ValueError(f'multiple must be >= 1, got {multiple}')
    _, H, W, _ = x.shape
    pad_b = (multiple - H % multiple) % multiple
    pad_r = (multiple - W % multiple) % multiple
    # no in-place writes, so that export traces it
    valid = (torch.arange(H + pad_b, device=x.device) < H)[:, None] & \
        (torch.arange(W + pad_r, device=x.device) < W)[None, :]
    if pad_b or pad_r or is_capturing():
        x = F.pad(x, (0, 0, 0, pad_r, 0, pad_b))
    return x, valid


def window_partition(x, window):
    """Cut a map into non-overlapping windows.

    Args:
        x (Tensor): ``(B, Hp, Wp, C)``, or a mask ``(Hp, Wp)``.
        window (int): window side.

    Returns:
        Tensor: ``(B * nW, window**2, C)`` (a mask: ``(nW, window**2)``).
    """
    if x.dim() == 2:
        return window_partition(x[None, ..., None], window)[..., 0]
    B, H, W, C = x.shape
    if H % window or W % window:
        raise ValueError(f'map {H}x{W} is not a multiple of window {window}')
    x = x.view(B, H // window, window, W // window, window, C)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, window * window, C)


def window_reverse(windows, window, height, width):
    """Inverse of :func:`window_partition`.

    Args:
        windows (Tensor): ``(B * nW, window * window, C)``.
        window (int): window side.
        height (int): ``Hp``, a multiple of ``window``.
        width (int): ``Wp``, a multiple of ``window``.

    Returns:
        Tensor: the map ``(B, Hp, Wp, C)``.
    """
    nh, nw = height // window, width // window
    C = windows.shape[-1]
    x = windows.view(-1, nh, nw, window, window, C)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, height, width, C)


def shift_regions(height, width, window, shift, device=None):
    """Region labels of Swin's shift mask on a shifted, padded map.

    Args:
        height (int): ``Hp``.
        width (int): ``Wp``.
        window (int): window side.
        shift (int): cyclic shift.
        device (torch.device, optional): where the labels go.

    Returns:
        Tensor: ``(height, width)`` long labels (all 0 without shift).
    """
    labels = torch.zeros(height, width, dtype=torch.long, device=device)
    if shift == 0:
        return labels
    slices = (slice(0, -window), slice(-window, -shift), slice(-shift, None))
    cnt = 0
    for h in slices:
        for w in slices:
            labels[h, w] = cnt
            cnt += 1
    return labels


def mask_or_none(valid, all_valid=None):
    """``valid``, or None when all True (not under graph capture).

    Args:
        valid (Tensor): bool mask of any shape.
        all_valid (bool, optional): decided on the host; else read.

    Returns:
        Tensor | None: ``valid``, or None if it is all True.
    """
    if is_capturing():
        return valid
    if all_valid is None:
        all_valid = bool(valid.all())
    return None if all_valid else valid


#: region around a window: ``'centred'`` (``(size - window) // 2`` before
#: it, clipped to the map) or ``'inside'`` (moved inside the real map)
REGION_PLACEMENTS = ('centred', 'inside')


def check_placement(placement):
    """Raise ``ValueError`` for an unknown region placement."""
    check_choice('key_region', placement, REGION_PLACEMENTS)


def valid_extent(valid):
    """Real rows and columns ``H, W`` of a validity mask, 0-d tensors.

    Args:
        valid (Tensor): ``(Hp, Wp)`` bool.

    Returns:
        tuple[Tensor, Tensor]: ``H`` and ``W``.
    """
    return valid.any(1).sum(), valid.any(0).sum()


def _region_starts(extent, real, window, size, placement, device):
    """Region starts ``a * window - (size - window) // 2`` (or inside)."""
    starts = torch.arange(0, extent, window, device=device) - \
        (size - window) // 2
    if placement == 'inside':
        starts = torch.minimum(starts, (real - size).clamp(min=0))
        starts = starts.clamp(min=0)
    return starts


def _region_axis(extent, window, size, device, starts):
    """Key coordinates of every window's region along one axis.

    Args:
        extent (int): length of the axis.
        window (int): window side (stride of the regions).
        size (int): region side.
        device (torch.device): where to build the indices.
        starts (Tensor): ``(n, )`` first coordinate of each region.

    Returns:
        tuple[Tensor, Tensor]: ``(n, min(size, extent))`` coords and flags.
    """
    if size <= extent:
        coords = starts[:, None] + torch.arange(size, device=device)
    else:
        coords = torch.arange(extent, device=device).expand(len(starts), -1)
    inside = (coords >= starts[:, None]) & (coords < starts[:, None] + size)
    inside &= (coords >= 0) & (coords < extent)
    return coords.clamp(0, extent - 1), inside


def _check_region(window, size, placement):
    if size < window:
        raise ValueError(f'region size {size} is smaller than the window '
                         f'{window}')
    check_placement(placement)


def neighbourhood_mask(valid, window, size, placement='centred'):
    """Each window's region as a mask on the whole map (dense form).

    Args:
        valid (Tensor): validity mask ``(Hp, Wp)``.
        window (int): window side (stride of the regions).
        size (int): region side, ``>= window``.
        placement (str): ``'centred'`` or ``'inside'``.

    Returns:
        Tensor: ``(nW, Hp * Wp)`` bool, valid positions of the region.
    """
    _check_region(window, size, placement)
    H, W = valid.shape
    real = valid_extent(valid)

    def _axis(extent, real):
        starts = _region_starts(extent, real, window, size, placement,
                                valid.device)[:, None]
        coords = torch.arange(extent, device=valid.device)
        return (coords >= starts) & (coords < starts + size)  # (n, extent)

    rows, cols = _axis(H, real[0]), _axis(W, real[1])
    mask = rows[:, None, :, None] & cols[None, :, None, :] & valid
    return mask.reshape(-1, H * W)


def _region_index(valid, rows, rows_in, cols, cols_in):
    """Flat positions ``(nW, Kh * Kw)`` of per-axis regions, and validity."""
    W = valid.shape[1]
    index = rows[:, None, :, None] * W + cols[None, :, None, :]
    mask = valid.reshape(-1)[index] & rows_in[:, None, :, None] & \
        cols_in[None, :, None, :]
    nW, K = index.shape[0] * index.shape[1], index.shape[2] * index.shape[3]
    return index.view(nW, K), mask.view(nW, K)


def _gather_regions(x, valid, rows, rows_in, cols, cols_in):
    """Gather per-axis regions: keys ``(B * nW, K, C)``, validity."""
    B, C = x.shape[0], x.shape[-1]
    index, mask = _region_index(valid, rows, rows_in, cols, cols_in)
    # one channels-last gather: each region contiguous for the fused kernels
    keys = x.reshape(B, -1, C)[:, index.reshape(-1)]
    return keys.view(B * index.shape[0], index.shape[1], C), mask


def neighbourhood_windows(x, valid, window, size, placement='centred'):
    """Gather, for every window, the ``size x size`` region around it.

    Args:
        x (Tensor): map ``(B, Hp, Wp, C)``.
        valid (Tensor): validity mask ``(Hp, Wp)``.
        window (int): window side (stride of the regions).
        size (int): region side, ``>= window``.
        placement (str): ``'centred'`` or ``'inside'``.

    Returns:
        tuple[Tensor, Tensor]: keys ``(B * nW, K, C)``, validity ``(nW, K)``,
        ``K = min(size, Hp) * min(size, Wp)``.
    """
    _check_region(window, size, placement)
    _, H, W, _ = x.shape
    real = valid_extent(valid)
    rows = _region_axis(
        H, window, size, x.device,
        _region_starts(H, real[0], window, size, placement, x.device))
    cols = _region_axis(
        W, window, size, x.device,
        _region_starts(W, real[1], window, size, placement, x.device))
    return _gather_regions(x, valid, *rows, *cols)


def _covered_axis(extent, real, window, size, placement, device):
    """``(n, n)`` bool: window ``c``'s real part is in ``a``'s region."""
    starts = _region_starts(extent, real, window, size, placement, device)
    lo, hi = starts.clamp(min=0), torch.minimum(starts + size, real)
    w0 = torch.arange(0, extent, window, device=device)
    w1 = torch.minimum(w0 + window, real)
    return (w0[None] >= lo[:, None]) & (w1[None] <= hi[:, None])


def covered_tokens_mask(valid, window, size, tokens, placement='centred'):
    """Per-window tokens of the windows lying entirely in each region.

    Args:
        valid (Tensor): validity mask of the map ``(Hp, Wp)``.
        window (int): window side on the map.
        size (int): region side on the map, ``>= window``.
        tokens (int): tokens per window side on the token grid.
        placement (str): ``'centred'`` or ``'inside'``.

    Returns:
        Tensor: ``(nW, Hp / window * tokens * Wp / window * tokens)``.
    """
    _check_region(window, size, placement)
    H, W = valid.shape
    real = valid_extent(valid)
    rows = _covered_axis(H, real[0], window, size, placement, valid.device)
    cols = _covered_axis(W, real[1], window, size, placement, valid.device)
    rows = rows.repeat_interleave(tokens, dim=1)
    cols = cols.repeat_interleave(tokens, dim=1)
    mask = rows[:, None, :, None] & cols[None, :, None, :]
    return mask.reshape(rows.shape[0] * cols.shape[0], -1)


@functools.lru_cache(maxsize=256)
def _host_covered_count(extent, real, window, size, placement):
    """Largest count of windows a region covers along one axis (CPU)."""
    covered = _covered_axis(extent, torch.tensor(real), window, size,
                            placement, 'cpu')
    return int(covered.sum(1).max())


def _covered_counts(hw, extents, window, size, placement):
    """:func:`_host_covered_count` per axis; ``(None, None)`` if unknown."""
    if hw is None or is_capturing():
        return None, None
    return tuple(
        _host_covered_count(int(n), int(r), window, size, placement)
        for n, r in zip(extents, hw))


def _covered_coords(covered, window, size, tokens, count=None):
    """Token coordinates ``(n, m)`` of covered windows on one axis, flags."""
    n = covered.shape[0]
    if is_capturing():
        m = torch.sym_min(n, size // window + 1) * tokens
    elif count is not None:
        m = count * tokens
    else:  # no host facts: a device-to-host synchronisation
        m = int(covered.sum(1).max()) * tokens
    first = covered.int().argmax(1)
    stop = (first + covered.sum(1)) * tokens
    coords = first[:, None] * tokens + torch.arange(m, device=covered.device)
    return coords.clamp(max=n * tokens - 1), coords < stop[:, None]


def covered_token_windows(grid, grid_valid, valid, window, size,
                          placement='centred', hw=None):
    """Gather, for every window, the per-window tokens of the windows that
    lie entirely in its region (:func:`covered_tokens_mask`).

    Args:
        grid (Tensor): token grid ``(B, nh * t, nw * t, C)``, ``t x t``
            tokens per window.
        grid_valid (Tensor): ``(nh * t, nw * t)`` bool.
        valid (Tensor): validity mask of the map ``(Hp, Wp)``.
        window (int): window side on the map.
        size (int): region side on the map, ``>= window``.
        placement (str): ``'centred'`` or ``'inside'``.
        hw (tuple[int, int], optional): real ``(H, W)``; else a host read.

    Returns:
        tuple[Tensor, Tensor]: ``(B * nW, K, C)`` and validity ``(nW, K)``.
    """
    _check_region(window, size, placement)
    H, W = valid.shape
    tokens = grid.shape[1] * window // H
    real = valid_extent(valid)
    counts = _covered_counts(hw, (H, W), window, size, placement)
    rows = _covered_coords(
        _covered_axis(H, real[0], window, size, placement, valid.device),
        window, size, tokens, counts[0])
    cols = _covered_coords(
        _covered_axis(W, real[1], window, size, placement, valid.device),
        window, size, tokens, counts[1])
    return _gather_regions(grid, grid_valid, *rows, *cols)


def region_windows_with_tokens(x, valid, grid, grid_valid, window, size,
                               placement='centred', hw=None):
    """:func:`covered_token_windows` and :func:`neighbourhood_windows` at once.

    Args:
        x (Tensor): map ``(B, Hp, Wp, C)``.
        valid (Tensor): its validity ``(Hp, Wp)``.
        grid (Tensor): per-window token grid ``(B, nh * t, nw * t, C)``.
        grid_valid (Tensor): ``(nh * t, nw * t)`` bool.
        window (int): window side on the map.
        size (int): region side on the map, ``>= window``.
        placement (str): ``'centred'`` or ``'inside'``.
        hw (tuple[int, int], optional): see :func:`covered_token_windows`.

    Returns:
        tuple[Tensor, Tensor]: ``(B * nW, K_t + K, C)``, ``(nW, K_t + K)``.
    """
    _check_region(window, size, placement)
    B, H, W, C = x.shape
    tokens = grid.shape[1] * window // H
    real = valid_extent(valid)
    counts = _covered_counts(hw, (H, W), window, size, placement)
    t_index, t_mask = _region_index(
        grid_valid, *_covered_coords(
            _covered_axis(H, real[0], window, size, placement, x.device),
            window, size, tokens, counts[0]), *_covered_coords(
                _covered_axis(W, real[1], window, size, placement, x.device),
                window, size, tokens, counts[1]))
    starts = (_region_starts(H, real[0], window, size, placement, x.device),
              _region_starts(W, real[1], window, size, placement, x.device))
    m_index, m_mask = _region_index(
        valid, *_region_axis(H, window, size, x.device, starts[0]),
        *_region_axis(W, window, size, x.device, starts[1]))
    n_tokens = grid.shape[1] * grid.shape[2]
    index = torch.cat((t_index, m_index + n_tokens), dim=1)
    source = torch.cat((grid.reshape(B, -1, C), x.reshape(B, -1, C)), dim=1)
    keys = source[:, index.reshape(-1)]
    return keys.view(B * index.shape[0], index.shape[1], C), \
        torch.cat((t_mask, m_mask), dim=1)
