"""ToMe inside Swin's windows (``docs/tome.md#swin``): every window merges
the same ``r`` tokens, each into a token of its own group (its shift region,
and padding or not), so that the shift mask and the relative position bias
of a merged token are those of the token it merged into.

Windows are ``(B * nW, n, C)``, ``n = w^2`` (mmdet's window order).
"""
import functools

import torch

from mmvitaccel.ops.host_masks import host_valid
from mmvitaccel.ops.windows import shift_regions, window_partition

__all__ = ['window_groups', 'window_merge_cap', 'merged_positions',
           'pair_index']


def window_groups(hw, padded_hw, window, shift):
    """The group of every window position: ``2 * region + padded``.

    Args:
        hw (tuple[int, int]): the real map ``(H, W)``.
        padded_hw (tuple[int, int]): ``(Hp, Wp)``, multiples of ``window``.
        window (int): ``w``.
        shift (int): the block's cyclic shift (0: no regions).

    Returns:
        Tensor: ``(nW, w^2)`` int64 on the CPU, in the shifted frame
        (cached: do not modify).
    """
    return _window_groups(tuple(hw), tuple(padded_hw), window, shift)


@functools.lru_cache(maxsize=256)
def _window_groups(hw, padded_hw, window, shift):
    padded = (~host_valid(hw, padded_hw)).long()
    if shift:
        padded = torch.roll(padded, (-shift, -shift), (0, 1))
    labels = 2 * shift_regions(*padded_hw, window, shift) + padded
    return window_partition(labels, window)


def window_merge_cap(groups):
    """The most tokens every window can merge: its set-A tokens (even
    positions) that have a set-B token (odd) of their group, the least over
    windows, and at most ``n // 2`` (the matching's own bound).

    Args:
        groups (Tensor): ``(nW, n)`` from :func:`window_groups`.

    Returns:
        int
    """
    a, b = groups[:, 0::2], groups[:, 1::2]
    paired = int((a[:, :, None] == b[:, None, :]).any(-1).sum(-1).min())
    return min(paired, groups.shape[1] // 2)


def merged_positions(merge, num_tokens):
    """The window position each merged token sits at: a kept A token at its
    own, every B token (merged into or not) at its own.

    Args:
        merge (TokenMerge): the matching of ``num_tokens`` tokens.
        num_tokens (int): ``n``.

    Returns:
        Tensor: ``(B * nW, n - r)`` int64, in :func:`~.tome.merge_tokens`'
        order (kept A tokens, then B).
    """
    unm = merge.unm_idx[..., 0]
    pos = torch.arange(num_tokens, device=unm.device)
    kept = pos[0::2][unm]
    return torch.cat([kept, pos[1::2].expand(kept.shape[0], -1)], dim=1)


def pair_index(index, pos):
    """A ``(n, n)`` pairwise table read at the merged tokens' positions:
    ``out[b, i, j] = index[pos[b, i], pos[b, j]]``.

    Args:
        index (Tensor): ``(n, n)``, e.g. Swin's relative position index.
        pos (Tensor): ``(B * nW, n')`` from :func:`merged_positions`.

    Returns:
        Tensor: ``(B * nW, n', n')``.
    """
    return index[pos[:, :, None], pos[:, None, :]]
