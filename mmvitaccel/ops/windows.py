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


def neighbourhood_windows(x, valid, window, size):
    """Gather, for every window, the ``size x size`` region centred on it.

    Window ``(a, b)`` covers rows ``[a*window, (a+1)*window)``; its region
    covers rows ``[a*window - l, a*window + window + r)`` with
    ``l = (size - window) // 2`` and ``r = size - window - l`` (the same for
    columns). Positions outside the map are zero and marked invalid, so the
    result does not depend on what lies beyond the map or in its padding.

    Args:
        x (Tensor): map ``(B, Hp, Wp, C)``, ``Hp, Wp`` multiples of
            ``window``.
        valid (Tensor): validity mask ``(Hp, Wp)``.
        window (int): window side (stride of the regions).
        size (int): region side, ``>= window``.

    Returns:
        tuple[Tensor, Tensor]: keys ``(B * nW, size * size, C)`` in the
        window order of :func:`window_partition`, and their validity
        ``(nW, size * size)``.
    """
    if size < window:
        raise ValueError(f'region size {size} is smaller than the window '
                         f'{window}')
    B, H, W, C = x.shape
    left = (size - window) // 2
    right = size - window - left
    # one channels-last gather from the zero-padded map: each region comes
    # out contiguous, ready for the fused attention kernels
    padded = F.pad(x, (0, 0, left, right, left, right))
    width = W + left + right
    offsets = torch.arange(size, device=x.device)
    rows = torch.arange(0, H, window, device=x.device)[:, None] + offsets
    cols = torch.arange(0, W, window, device=x.device)[:, None] + offsets
    # (nh, nw, size, size) flat indices into the padded map
    index = (rows[:, None, :, None] * width + cols[None, :, None, :])
    index = index.reshape(-1)
    nW = (H // window) * (W // window)
    keys = padded.reshape(B, -1, C)[:, index].view(B * nW, size * size, C)
    mask = F.pad(valid, (left, right, left, right)).reshape(-1)[index]
    return keys, mask.view(nW, size * size)
