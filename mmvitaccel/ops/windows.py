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
import torch
import torch.nn.functional as F


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
    valid = torch.zeros(H + pad_b, W + pad_r, dtype=torch.bool,
                        device=x.device)
    valid[:H, :W] = True
    if pad_b or pad_r:
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


def mask_or_none(valid):
    """A key validity mask, or None when every key is valid, so that
    attention takes its faster unmasked path.

    Args:
        valid (Tensor): bool mask of any shape.

    Returns:
        Tensor | None: ``valid``, or None if it is all True.
    """
    return None if bool(valid.all()) else valid


def _region_axis(extent, window, size, device):
    """Key coordinates of every window's region along one axis.

    Window ``a`` covers ``[a*window, (a+1)*window)``; its region covers
    ``[a*window - l, a*window + window + r)`` with ``l = (size - window) // 2``
    and ``r = size - window - l``. A region longer than the axis is read as
    the whole axis, with the coordinates outside the region marked, so that
    no window carries more keys than the map has.

    Args:
        extent (int): length of the axis.
        window (int): window side (stride of the regions).
        size (int): region side.
        device (torch.device): where to build the indices.

    Returns:
        tuple[Tensor, Tensor]: coordinates ``(n, m)`` clamped into the axis
        (``n = extent / window`` windows, ``m = min(size, extent)``) and
        ``(n, m)`` bool, True where the coordinate lies both in the window's
        region and inside the axis.
    """
    starts = torch.arange(0, extent, window, device=device) - \
        (size - window) // 2
    if size <= extent:
        coords = starts[:, None] + torch.arange(size, device=device)
    else:
        coords = torch.arange(extent, device=device).expand(len(starts), -1)
    inside = (coords >= starts[:, None]) & (coords < starts[:, None] + size)
    inside &= (coords >= 0) & (coords < extent)
    return coords.clamp(0, extent - 1), inside


def neighbourhood_mask(valid, window, size):
    """Which map positions each window's region holds, as a mask on the
    whole map (the dense form of :func:`neighbourhood_windows`).

    Args:
        valid (Tensor): validity mask ``(Hp, Wp)``, sides multiples of
            ``window``.
        window (int): window side (stride of the regions).
        size (int): region side, ``>= window``.

    Returns:
        Tensor: ``(nW, Hp * Wp)`` bool, True where a position lies in the
        window's ``size x size`` region and is valid; windows in the order
        of :func:`window_partition`, positions row-major.
    """
    if size < window:
        raise ValueError(f'region size {size} is smaller than the window '
                         f'{window}')
    H, W = valid.shape

    def _axis(extent):
        starts = torch.arange(0, extent, window, device=valid.device)
        starts = starts[:, None] - (size - window) // 2
        coords = torch.arange(extent, device=valid.device)
        return (coords >= starts) & (coords < starts + size)  # (n, extent)

    rows, cols = _axis(H), _axis(W)
    mask = rows[:, None, :, None] & cols[None, :, None, :] & valid
    return mask.reshape(-1, H * W)


def neighbourhood_windows(x, valid, window, size):
    """Gather, for every window, the ``size x size`` region centred on it.

    Window ``(a, b)`` covers rows ``[a*window, (a+1)*window)``; its region
    covers rows ``[a*window - l, a*window + window + r)`` with
    ``l = (size - window) // 2`` and ``r = size - window - l`` (the same for
    columns). Positions outside the map or in its padding are marked
    invalid, so attention masked with the validity does not depend on what
    they hold. Along an axis shorter than ``size`` every region is read as
    the whole axis, with the positions outside the region marked invalid:
    the keys then number ``min(size, Hp) * min(size, Wp)`` instead of
    ``size ** 2`` (e.g. a 27x27 region on a 6x6 map holds 36 keys, not 729),
    for exactly the same attention.

    Args:
        x (Tensor): map ``(B, Hp, Wp, C)``, ``Hp, Wp`` multiples of
            ``window``.
        valid (Tensor): validity mask ``(Hp, Wp)``.
        window (int): window side (stride of the regions).
        size (int): region side, ``>= window``.

    Returns:
        tuple[Tensor, Tensor]: keys ``(B * nW, Kh * Kw, C)`` in the window
        order of :func:`window_partition` (``Kh = min(size, Hp)``,
        ``Kw = min(size, Wp)``, row-major within a region), and their
        validity ``(nW, Kh * Kw)``.
    """
    if size < window:
        raise ValueError(f'region size {size} is smaller than the window '
                         f'{window}')
    B, H, W, C = x.shape
    rows, rows_in = _region_axis(H, window, size, x.device)
    cols, cols_in = _region_axis(W, window, size, x.device)
    # one channels-last gather: each region comes out contiguous, ready for
    # the fused attention kernels. index: (nh, nw, Kh, Kw) into the map
    index = rows[:, None, :, None] * W + cols[None, :, None, :]
    mask = valid.reshape(-1)[index] & rows_in[:, None, :, None] & \
        cols_in[None, :, None, :]
    nW, K = index.shape[0] * index.shape[1], index.shape[2] * index.shape[3]
    keys = x.reshape(B, -1, C)[:, index.reshape(-1)].view(B * nW, K, C)
    return keys, mask.view(nW, K)
