"""Window geometry on token grids, with validity masks for padding.

Plain torch, shared by every method that works on (shifted) windows. Maps
are channels-last, ``(B, H, W, C)``; window order is raster order of the
window grid, batch-major, as in Swin (``window_partition`` of mmdet and
mmpretrain).

A *validity mask* is a bool tensor that is True on real tokens and False on
padding. Padding added here is the same for every image of a batch, so the
masks have no batch dimension: ``(Hp, Wp)`` for maps and
``(num_windows, tokens)`` for windows.
"""
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
        tuple[Tensor, Tensor]: the padded map ``(B, Hp, Wp, C)`` (zeros in
        the padding) and its validity mask ``(Hp, Wp)``.
    """
    if multiple < 1:
        raise ValueError(f'multiple must be >= 1, got {multiple}')
    _, H, W, _ = x.shape
    pad_b = (multiple - H % multiple) % multiple
    pad_r = (multiple - W % multiple) % multiple
    # built without in-place writes, so that export traces it
    valid = (torch.arange(H + pad_b, device=x.device) < H)[:, None] & \
        (torch.arange(W + pad_r, device=x.device) < W)[None, :]
    if pad_b or pad_r or is_capturing():
        x = F.pad(x, (0, 0, 0, pad_r, 0, pad_b))
    return x, valid


def window_partition(x, window):
    """Cut a map into non-overlapping windows.

    Args:
        x (Tensor): ``(B, Hp, Wp, C)`` with ``Hp, Wp`` multiples of
            ``window``; a mask ``(Hp, Wp)`` is accepted too.
        window (int): window side.

    Returns:
        Tensor: ``(B * nW, window * window, C)`` (or ``(nW, window *
        window)`` for a mask), ``nW = Hp * Wp / window**2``.
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


def mask_or_none(valid, all_valid=None):
    """A key validity mask, or None when every key is valid, so that
    attention takes its faster unmasked path.

    Args:
        valid (Tensor): bool mask of any shape.
        all_valid (bool, optional): whether ``valid`` is all True, decided
            on the host (for masks made from padding, from the shapes:
            :mod:`~mmvitaccel.ops.host_masks`). Without it the mask is
            read, a device-to-host synchronisation on an accelerator (and
            an error on ``meta``); the backbones always give it.

    Returns:
        Tensor | None: ``valid``, or None if it is all True (never None
        under graph capture, :func:`~mmvitaccel.ops.is_capturing`).
    """
    if is_capturing():
        return valid
    if all_valid is None:
        all_valid = bool(valid.all())
    return None if all_valid else valid


#: where a ``size x size`` key region sits around its window:
#: ``'centred'``: centred on the window (``l = (size - window) // 2`` before
#: it, ``size - window - l`` after it), the parts outside the map dropped;
#: ``'inside'``: the same region moved along each axis until it lies inside
#: the map (a region longer than the map is the whole map)
REGION_PLACEMENTS = ('centred', 'inside')


def check_placement(placement):
    """Raise a clear ``ValueError`` for an unknown region placement."""
    check_choice('key_region', placement, REGION_PLACEMENTS)


def valid_extent(valid):
    """Rows and columns of the real map in a validity mask (padding is at
    the bottom and right, :func:`pad_to_multiple`).

    Args:
        valid (Tensor): ``(Hp, Wp)`` bool.

    Returns:
        tuple[Tensor, Tensor]: ``H`` and ``W`` as 0-d long tensors (no
        host synchronisation).
    """
    return valid.any(1).sum(), valid.any(0).sum()


def _region_starts(extent, real, window, size, placement, device):
    """First coordinate of every window's region along one axis (before
    clipping to the map): ``a * window - (size - window) // 2``, and with
    ``placement='inside'`` moved to ``[0, max(real - size, 0)]``, ``real``
    being the real (unpadded) length of the axis."""
    starts = torch.arange(0, extent, window, device=device) - \
        (size - window) // 2
    if placement == 'inside':
        starts = torch.minimum(starts, (real - size).clamp(min=0))
        starts = starts.clamp(min=0)
    return starts


def _region_axis(extent, window, size, device, starts):
    """Key coordinates of every window's region along one axis.

    Window ``a`` covers ``[a*window, (a+1)*window)``; its region covers
    ``[starts[a], starts[a] + size)``. A region longer than the axis is read
    as the whole axis, with the coordinates outside the region marked, so
    that no window carries more keys than the map has.

    Args:
        extent (int): length of the axis.
        window (int): window side (stride of the regions).
        size (int): region side.
        device (torch.device): where to build the indices.
        starts (Tensor): ``(n, )`` first coordinate of each region
            (:func:`_region_starts`).

    Returns:
        tuple[Tensor, Tensor]: coordinates ``(n, m)`` clamped into the axis
        (``n = extent / window`` windows, ``m = min(size, extent)``) and
        ``(n, m)`` bool, True where the coordinate lies both in the window's
        region and inside the axis.
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
    """Which map positions each window's region holds, as a mask on the
    whole map (the dense form of :func:`neighbourhood_windows`).

    Args:
        valid (Tensor): validity mask ``(Hp, Wp)``, sides multiples of
            ``window``.
        window (int): window side (stride of the regions).
        size (int): region side, ``>= window``.
        placement (str): ``'centred'`` or ``'inside'``
            (:data:`REGION_PLACEMENTS`).

    Returns:
        Tensor: ``(nW, Hp * Wp)`` bool, True where a position lies in the
        window's ``size x size`` region and is valid; windows in the order
        of :func:`window_partition`, positions row-major.
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
    """Flat map positions ``(nW, Kh * Kw)`` of the regions given per axis by
    coordinates ``(n, m)`` and their in-region flags, and their validity
    ``(nW, Kh * Kw)``."""
    W = valid.shape[1]
    index = rows[:, None, :, None] * W + cols[None, :, None, :]
    mask = valid.reshape(-1)[index] & rows_in[:, None, :, None] & \
        cols_in[None, :, None, :]
    nW, K = index.shape[0] * index.shape[1], index.shape[2] * index.shape[3]
    return index.view(nW, K), mask.view(nW, K)


def _gather_regions(x, valid, rows, rows_in, cols, cols_in):
    """Gather the regions given per axis by coordinates ``(n, m)`` and
    their in-region flags: keys ``(B * nW, Kh * Kw, C)`` and validity
    ``(nW, Kh * Kw)``."""
    B, C = x.shape[0], x.shape[-1]
    index, mask = _region_index(valid, rows, rows_in, cols, cols_in)
    # one channels-last gather: each region comes out contiguous, ready for
    # the fused attention kernels
    keys = x.reshape(B, -1, C)[:, index.reshape(-1)]
    return keys.view(B * index.shape[0], index.shape[1], C), mask


def neighbourhood_windows(x, valid, window, size, placement='centred'):
    """Gather, for every window, the ``size x size`` region around it.

    Window ``(a, b)`` covers rows ``[a*window, (a+1)*window)``. With
    ``placement='centred'`` its region covers rows
    ``[a*window - l, a*window + window + r)`` with
    ``l = (size - window) // 2`` and ``r = size - window - l`` (the same for
    columns); with ``'inside'`` that region is moved until it lies inside
    the real (unpadded) map, so that it holds ``min(size, H)`` real rows.
    Positions outside the map or in its padding are marked invalid, so
    attention masked with the validity does not depend on what they hold.
    Along an axis shorter than ``size`` every region is read as the whole
    axis, with the positions outside the region marked invalid: the keys
    then number ``min(size, Hp) * min(size, Wp)`` instead of ``size ** 2``
    (e.g. a 27x27 region on a 6x6 map holds 36 keys, not 729), for exactly
    the same attention.

    Args:
        x (Tensor): map ``(B, Hp, Wp, C)``, ``Hp, Wp`` multiples of
            ``window``.
        valid (Tensor): validity mask ``(Hp, Wp)``.
        window (int): window side (stride of the regions).
        size (int): region side, ``>= window``.
        placement (str): ``'centred'`` or ``'inside'``
            (:data:`REGION_PLACEMENTS`).

    Returns:
        tuple[Tensor, Tensor]: keys ``(B * nW, Kh * Kw, C)`` in the window
        order of :func:`window_partition` (``Kh = min(size, Hp)``,
        ``Kw = min(size, Wp)``, row-major within a region), and their
        validity ``(nW, Kh * Kw)``.
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
    """``(n, n)`` bool along one axis: window ``c`` lies in the region of
    window ``a`` (its real part, ``[c*window, min((c+1)*window, real))``,
    inside the region clipped to ``[0, real)``)."""
    starts = _region_starts(extent, real, window, size, placement, device)
    lo, hi = starts.clamp(min=0), torch.minimum(starts + size, real)
    w0 = torch.arange(0, extent, window, device=device)
    w1 = torch.minimum(w0 + window, real)
    return (w0[None] >= lo[:, None]) & (w1[None] <= hi[:, None])


def covered_tokens_mask(valid, window, size, tokens, placement='centred'):
    """Which per-window tokens (e.g. the ``tokens x tokens`` semantic
    tokens of every window) belong to each window's region: those of the
    windows that lie entirely in the region. The dense form of
    :func:`covered_token_windows`.

    Args:
        valid (Tensor): validity mask of the map ``(Hp, Wp)``, sides
            multiples of ``window``.
        window (int): window side on the map.
        size (int): region side on the map, ``>= window``.
        tokens (int): tokens per window side on the token grid, which is
            ``(Hp / window * tokens, Wp / window * tokens)``.
        placement (str): ``'centred'`` or ``'inside'``.

    Returns:
        Tensor: ``(nW, Hp / window * tokens * Wp / window * tokens)`` bool,
        windows in the order of :func:`window_partition`, tokens row-major
        on the token grid.
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
    """The largest number of windows a region covers along one axis of
    real length ``real`` (an int), computed on the CPU."""
    covered = _covered_axis(extent, torch.tensor(real), window, size,
                            placement, 'cpu')
    return int(covered.sum(1).max())


def _covered_counts(hw, extents, window, size, placement):
    """:func:`_host_covered_count` of both axes, or ``(None, None)``
    without the real ``hw`` or under graph capture."""
    if hw is None or is_capturing():
        return None, None
    return tuple(
        _host_covered_count(int(n), int(r), window, size, placement)
        for n, r in zip(extents, hw))


def _covered_coords(covered, window, size, tokens, count=None):
    """Token-grid coordinates of the covered windows along one axis: the
    covered windows of a region are consecutive, ``[c0, c0 + count)``;
    every region reads ``m`` windows from ``c0``, ``m`` the largest count
    (``count``, known on the host; without it read from ``covered``), the
    extra ones marked. Under graph capture ``m`` is the bound
    ``size // window + 1`` windows (no host read of the count; the extra
    ones are marked too, the attention is the same)."""
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
    lie entirely in its region (see :func:`covered_tokens_mask`).

    Args:
        grid (Tensor): token grid ``(B, nh * t, nw * t, C)``, ``t x t``
            tokens per window.
        grid_valid (Tensor): ``(nh * t, nw * t)`` bool.
        valid (Tensor): validity mask of the map ``(Hp, Wp)``,
            ``Hp = nh * window``.
        window (int): window side on the map.
        size (int): region side on the map, ``>= window``.
        placement (str): ``'centred'`` or ``'inside'``.
        hw (tuple[int, int], optional): the real map ``(H, W)`` of which
            ``valid`` is the padding mask, known on the host; without it
            the number of covered windows is read from the device.

    Returns:
        tuple[Tensor, Tensor]: tokens ``(B * nW, Kh * Kw, C)`` in the window
        order of :func:`window_partition` and their validity
        ``(nW, Kh * Kw)``.
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
    """:func:`covered_token_windows` then :func:`neighbourhood_windows`,
    concatenated per window, in one gather.

    The regions overlap, so the gathered keys are larger than the map; one
    gather from the token grid and the map put end to end writes them once,
    where gathering both and concatenating would copy them twice.

    Args:
        x (Tensor): map ``(B, Hp, Wp, C)``.
        valid (Tensor): its validity ``(Hp, Wp)``.
        grid (Tensor): per-window token grid ``(B, nh * t, nw * t, C)``.
        grid_valid (Tensor): ``(nh * t, nw * t)`` bool.
        window (int): window side on the map.
        size (int): region side on the map, ``>= window``.
        placement (str): ``'centred'`` or ``'inside'``.
        hw (tuple[int, int], optional): as in
            :func:`covered_token_windows`.

    Returns:
        tuple[Tensor, Tensor]: keys ``(B * nW, K_t + K, C)``, the covered
        tokens first, and their validity ``(nW, K_t + K)``.
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
