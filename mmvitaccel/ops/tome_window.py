"""ToMe in Swin's windows and stages: token groups, positions and cells
(``docs/tome.md#swin``). Windows are ``(B * nW, n, C)``, ``n = w^2``, in
mmdet's window order."""
import functools

import torch

from mmvitaccel.ops.host_sync import device_constant
from mmvitaccel.ops.tracing import is_capturing
from mmvitaccel.ops.windows import shift_regions, window_partition

__all__ = ['window_groups', 'window_merge_cap', 'map_merge_cap',
           'merged_positions',
           'pair_index', 'block_cells', 'shared_cells',
           'clamped_relative_index']


def window_groups(hw, padded_hw, window, shift, device='cpu'):
    """The group of every window position: ``2 * region + padded``.

    Args:
        hw (tuple[int, int]): the real map ``(H, W)``.
        padded_hw (tuple[int, int]): ``(Hp, Wp)``, multiples of ``window``.
        window (int): ``w``.
        shift (int): the block's cyclic shift, ``0 <= shift < window`` (0:
            no regions).
        device (torch.device | str): built there, no copy from the host
            (kept per device by :func:`~.host_sync.device_constant`: read
            only).

    Returns:
        Tensor: ``(nW, w^2)`` int64, in the shifted frame.
    """
    args = (tuple(int(v) for v in hw), tuple(int(v) for v in padded_hw),
            int(window), int(shift))
    return device_constant(
        ('tome.window_groups', ) + args,
        lambda d: (_build_window_groups(*args, d), ), device)[0]


def _build_window_groups(hw, padded_hw, window, shift, device):
    (H, W), (Hp, Wp) = hw, padded_hw
    padded = ((torch.arange(Hp, device=device) >= H)[:, None] |
              (torch.arange(Wp, device=device) >= W)[None, :]).long()
    if shift:
        padded = torch.roll(padded, (-shift, -shift), (0, 1))
    labels = 2 * shift_regions(Hp, Wp, window, shift, device) + padded
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


def map_merge_cap(hw, padded_hw, window, shift):
    """:func:`window_merge_cap` of :func:`window_groups`, in Python
    integers: no tensor, so that it holds under graph capture. Eager calls
    are cached per arguments; under capture the count is traced (it runs
    once per graph) and the cache is left alone, which Dynamo would
    otherwise bypass with a warning.

    A position's group is ``2 (3 a(y) + b(x)) + (p(y) | q(x))``, the row
    and column shift bands ``a``, ``b`` and padding ``p``, ``q``: a window's
    groups follow from its rows' ``(a, p)`` and its columns' ``(b, q)``,
    of which a map has few distinct runs.

    Args:
        hw (tuple[int, int]): ``(H, W)``.
        padded_hw (tuple[int, int]): ``(Hp, Wp)``, multiples of ``window``.
        window (int): ``w``.
        shift (int): the block's cyclic shift.

    Returns:
        int
    """
    if is_capturing():
        return _map_merge_cap(hw, padded_hw, window, shift)
    return _cached_map_merge_cap(hw, padded_hw, window, shift)


def _map_merge_cap(hw, padded_hw, window, shift):
    """:func:`map_merge_cap`'s count, uncached."""
    def axis_runs(real, padded):
        # position i of the shifted frame held position (i + shift) % padded
        def label(i):
            band = 0 if not shift or i < padded - window else \
                1 if i < padded - shift else 2
            return band, int((i + shift) % padded >= real)
        return {tuple(label(k * window + i) for i in range(window))
                for k in range(padded // window)}

    n, best = window * window, window * window // 2
    for rows in axis_runs(hw[0], padded_hw[0]):
        for cols in axis_runs(hw[1], padded_hw[1]):
            groups = [2 * (3 * a + b) + (p | q) for a, p in rows
                      for b, q in cols]
            b_groups = set(groups[1::2])
            best = min(best, sum(g in b_groups for g in groups[0::2]))
    return best if n > 1 else 0


_cached_map_merge_cap = functools.lru_cache(maxsize=256)(_map_merge_cap)


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


def block_cells(hw, window, shift, device='cpu'):
    """The cell of every map position in a block's frame: its window of the
    shifted, padded map and its shift region there.

    Args:
        hw (tuple[int, int]): the map ``(H, W)``.
        window (int): ``w``.
        shift (int): the block's cyclic shift, ``0 <= shift < window``.
        device (torch.device | str): built there, no copy from the host
            (kept per device by :func:`~.host_sync.device_constant`: read
            only).

    Returns:
        tuple[Tensor, int]: ``(H W, )`` int64 cell ids in the map's
        row-major order, and the number of cells.
    """
    (H, W), window, shift = (int(v) for v in hw), int(window), int(shift)
    Hp, Wp = -(-H // window) * window, -(-W // window) * window
    cells = device_constant(
        ('tome.block_cells', H, W, window, shift),
        lambda d: (_build_block_cells(H, W, Hp, Wp, window, shift, d), ),
        device)[0]
    return cells, Hp * Wp // window**2 * 9


def _build_block_cells(H, W, Hp, Wp, window, shift, device):
    ys = torch.arange(Hp, device=device)[:, None].expand(Hp, Wp)
    xs = torch.arange(Wp, device=device)[None, :].expand(Hp, Wp)
    win = (ys // window) * (Wp // window) + xs // window
    cells = win * 9 + shift_regions(Hp, Wp, window, shift, device)
    if shift:  # back to the map's frame: position p sat at p - shift
        cells = torch.roll(cells, (shift, shift), (0, 1))
    return cells[:H, :W].reshape(-1).contiguous()


def shared_cells(cells, num_cells, slot, num_merged):
    """Which merged tokens share a cell: ``A = (M M^T > 0)``, ``M[t, c]``
    the count of token ``t``'s patches in cell ``c``.

    Args:
        cells (Tensor): ``(L, )`` from :func:`block_cells`.
        num_cells (int): the number of cells.
        slot (Tensor): ``(B, L)`` the merged token holding each position.
        num_merged (int): ``L'``.

    Returns:
        Tensor: ``(B, L', L')`` bool, true on the diagonal.
    """
    B, L = slot.shape
    # one-hot by comparison (torch 2.1's one_hot refuses meta tensors)
    onehot = cells.to(slot.device)[:, None] == torch.arange(
        num_cells, device=slot.device)
    member = torch.zeros(B, num_merged, num_cells, device=slot.device)
    member = member.scatter_add(
        1, slot[..., None].expand(B, L, num_cells),
        onehot.to(member.dtype).expand(B, L, num_cells))
    return (member @ member.transpose(1, 2)) > 0


def clamped_relative_index(pos, width, window):
    """Swin's relative position index of the offset between two map
    positions, clamped to a window's range: ``(dy + w - 1) (2 w - 1) + dx +
    w - 1``, ``|dy|, |dx| <= w - 1``.

    Args:
        pos (Tensor): ``(B, L')`` row-major map positions.
        width (int): the map's ``W``.
        window (int): ``w``.

    Returns:
        Tensor: ``(B, L', L')`` int64 rows of the bias table.
    """
    ys, xs = pos // width, pos % width
    dy = (ys[:, :, None] - ys[:, None, :]).clamp(1 - window, window - 1)
    dx = (xs[:, :, None] - xs[:, None, :]).clamp(1 - window, window - 1)
    return (dy + window - 1) * (2 * window - 1) + dx + window - 1
