"""Facts about padding-derived masks, decided on the host from ``(H, W)`` and
``(Hp, Wp)`` on cached CPU twins; None without ``(H, W)`` or under capture."""
import functools

import torch

from mmvitaccel.ops.stvit import pool_centres
from mmvitaccel.ops.tracing import is_capturing
from mmvitaccel.ops.windows import (covered_tokens_mask, neighbourhood_mask,
                                    neighbourhood_windows,
                                    region_windows_with_tokens,
                                    window_partition, window_reverse)

__all__ = ['host_valid', 'padded_shape', 'unpadded', 'semantic_valid_host',
           'semantic_all_valid', 'semantic_extent', 'regions_all_valid']


def _pair(hw):
    return tuple(int(n) for n in hw)


def padded_shape(hw, multiple):
    """``(H, W)`` rounded up to multiples of ``multiple``: ``(Hp, Wp)``."""
    return tuple(-(-int(n) // multiple) * multiple for n in hw)


def unpadded(hw, padded_hw):
    """Whether a map of real size ``hw`` padded to ``padded_hw`` has no
    padding.

    Args:
        hw (tuple[int, int] | None): the real ``(H, W)``.
        padded_hw (tuple[int, int]): ``(Hp, Wp)``.

    Returns:
        bool | None: None when ``hw`` is None or under graph capture.
    """
    if hw is None or is_capturing():
        return None
    return _pair(hw) == _pair(padded_hw)


def host_valid(hw, padded_hw):
    """CPU twin of :func:`~mmvitaccel.ops.windows.pad_to_multiple`'s mask.

    Args:
        hw (tuple[int, int]): ``(H, W)``.
        padded_hw (tuple[int, int]): ``(Hp, Wp)``.

    Returns:
        Tensor: ``(Hp, Wp)`` bool, on the CPU (cached: do not modify).
    """
    return _host_valid(_pair(hw), _pair(padded_hw))


@functools.lru_cache(maxsize=256)
def _host_valid(hw, padded_hw):
    (H, W), (Hp, Wp) = hw, padded_hw
    return (torch.arange(Hp) < H)[:, None] & (torch.arange(Wp) < W)[None, :]


@functools.lru_cache(maxsize=256)
def _semantic_valid(hw, padded_hw, window, tokens):
    valid_w = window_partition(_host_valid(hw, padded_hw), window)
    _, sem_valid = pool_centres(
        torch.zeros(valid_w.shape[0], window * window, 1), (window, window),
        (tokens, tokens), valid=valid_w)
    nh, nw = padded_hw[0] // window, padded_hw[1] // window
    return window_reverse(sem_valid[..., None], tokens, nh * tokens,
                          nw * tokens)[0, ..., 0]


def semantic_valid_host(hw, padded_hw, window, tokens):
    """Validity of the ``tokens x tokens`` centres pooled from each window
    (:func:`~mmvitaccel.ops.pool_centres`) on their grid, on the CPU.

    Args:
        hw (tuple[int, int]): the real map ``(H, W)``.
        padded_hw (tuple[int, int]): ``(Hp, Wp)``, multiples of ``window``.
        window (int): window side.
        tokens (int): pooled tokens per window side.

    Returns:
        Tensor: ``(Hp / window * tokens, Wp / window * tokens)`` bool
        (cached: do not modify).
    """
    return _semantic_valid(_pair(hw), _pair(padded_hw), window, tokens)


@functools.lru_cache(maxsize=256)
def _semantic_facts(hw, padded_hw, window, tokens):
    grid = _semantic_valid(hw, padded_hw, window, tokens)
    extent = (int(grid.any(1).sum()), int(grid.any(0).sum()))
    # ordered bins: the valid tokens are a top-left rectangle
    if not torch.equal(grid, _host_valid(extent, tuple(grid.shape))):
        raise AssertionError(f'semantic validity of {hw} in {padded_hw} is '
                             f'not a padding mask')
    return bool(grid.all()), extent


def semantic_all_valid(hw, padded_hw, window, tokens):
    """Whether every pooled token is valid (None: unknown)."""
    if hw is None or is_capturing():
        return None
    return _semantic_facts(_pair(hw), _pair(padded_hw), window, tokens)[0]


def semantic_extent(hw, padded_hw, window, tokens):
    """Rows and columns of the pooled grid holding a valid token (None:
    unknown); the grid's validity is the padding mask of that extent."""
    if hw is None or is_capturing():
        return None
    return _semantic_facts(_pair(hw), _pair(padded_hw), window, tokens)[1]


@functools.lru_cache(maxsize=512)
def _regions_all_valid(hw, padded_hw, window, size, placement, tokens,
                       dense):
    valid = _host_valid(hw, padded_hw)
    grid_valid = None if tokens is None else _semantic_valid(
        hw, padded_hw, window, tokens)
    if dense:
        mask = neighbourhood_mask(valid, window, size, placement)
        if grid_valid is not None:
            mask = torch.cat(
                (covered_tokens_mask(valid, window, size, tokens, placement)
                 & grid_valid.reshape(1, -1), mask), dim=1)
    elif grid_valid is None:
        _, mask = neighbourhood_windows(
            torch.zeros(1, *padded_hw, 1), valid, window, size, placement)
    else:
        _, mask = region_windows_with_tokens(
            torch.zeros(1, *padded_hw, 1), valid,
            torch.zeros(1, *grid_valid.shape, 1), grid_valid, window, size,
            placement, hw=hw)
    return bool(mask.all())


def regions_all_valid(hw, padded_hw, window, size, placement='centred',
                      tokens=None, dense=False):
    """Whether every key of STViT's region attention is valid (the masks
    of :func:`~mmvitaccel.ops.neighbourhood_windows` or, ``dense``,
    :func:`~mmvitaccel.ops.neighbourhood_mask`, after the covered pooled
    tokens when ``tokens`` is given).

    Args:
        hw (tuple[int, int] | None): the real map ``(H, W)``.
        padded_hw (tuple[int, int]): ``(Hp, Wp)``, multiples of ``window``.
        window (int): window side.
        size (int): region side.
        placement (str): ``'centred'`` or ``'inside'``.
        tokens (int, optional): pooled tokens per window side.
        dense (bool): the dense (whole map, per-query mask) form.

    Returns:
        bool | None: None when ``hw`` is None or under graph capture.
    """
    if hw is None or is_capturing():
        return None
    return _regions_all_valid(_pair(hw), _pair(padded_hw), window, size,
                              placement, tokens, bool(dense))
