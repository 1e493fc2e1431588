"""Dropping pruned tokens for real (padded to the batch's largest count, the
padding masked out of the keys) and scattering them back."""
import torch

from mmvitaccel.ops.host_sync import host_read
from mmvitaccel.ops.tracing import is_capturing

__all__ = ['gather_tokens', 'kept_indices', 'pad_kept_tokens',
           'restore_tokens']


def _kept_order(keep):
    """:func:`kept_indices` and whether a row is padded (one host read)."""
    counts = keep.sum(dim=-1)
    N = keep.shape[-1]
    if is_capturing():  # a data-dependent size in the graph
        k_max = counts.max().clamp_min(1).item()
        torch._check(k_max >= 1)
        torch._check(k_max <= N)
        padded = True
    else:  # meta: every token kept, rows taken as padded (masked keys)
        k_max, k_min = host_read(
            torch.stack((counts.max(), counts.min())), [N, 0],
            'kept_token_counts')
        k_max = max(1, k_max)
        padded = k_min < k_max
    # stable order: kept tokens first, in ascending position
    key = (~keep).to(torch.int64) * N + torch.arange(
        N, device=keep.device)
    order = key.argsort(dim=-1)[:, :k_max]
    valid = torch.arange(k_max, device=keep.device)[None] < counts[:, None]
    return order, valid, padded


def kept_indices(keep):
    """Indices of the kept tokens of each row, ascending, padded.

    Args:
        keep (Tensor): ``(B, N)`` bool.

    Returns:
        tuple[Tensor, Tensor]: ``(B, K_max)`` indices (padded with the row's
        pruned positions) and ``(B, K_max)`` bool validity.
    """
    return _kept_order(keep)[:2]


def gather_tokens(x, index):
    """``x[b, index[b, k]]``.

    Args:
        x (Tensor): ``(B, N, C)``.
        index (Tensor): ``(B, K)``.

    Returns:
        Tensor: ``(B, K, C)``.
    """
    return x.gather(1, index[..., None].expand(-1, -1, x.shape[-1]))


def pad_kept_tokens(tokens, keep, num_extra_tokens=1):
    """Drop pruned patch tokens, padding to the largest count in the batch.

    Args:
        tokens (Tensor): ``(B, E + N, C)``, ``E = num_extra_tokens``.
        keep (Tensor): ``(B, N)`` bool over the patch tokens.
        num_extra_tokens (int): ``E``, kept in front.

        tuple[Tensor, Tensor, Tensor]: tokens ``(B, E + K_max, C)``, kept
        positions ``(B, K_max)``, key mask ``(B, E + K_max)`` (None when no
        row is padded).
    """
    index, valid, padded = _kept_order(keep)
    extra = tokens[:, :num_extra_tokens]
    kept = gather_tokens(tokens[:, num_extra_tokens:], index)
    out = torch.cat((extra, kept), dim=1)
    if not padded:
        return out, index, None
    key_mask = torch.cat((valid.new_ones(valid.shape[0], num_extra_tokens),
                          valid), dim=1)
    return out, index, key_mask


def restore_tokens(full, tokens, index, valid=None):
    """Scatter kept tokens back onto the full patch grid.

    Args:
        full (Tensor): ``(B, N, C)`` features of every position.
        tokens (Tensor): ``(B, K, C)`` the kept tokens.
        index (Tensor): ``(B, K)`` their positions in ``0 .. N-1``.
        valid (Tensor, optional): ``(B, K)`` bool; padding is not written.

    Returns:
        Tensor: ``(B, N, C)``, ``full[b, index[b, k]] = tokens[b, k]``.
    """
    if valid is not None:
        # padding slots write the position's own value back
        tokens = torch.where(valid[..., None], tokens,
                             gather_tokens(full, index))
    return full.scatter(1, index[..., None].expand(-1, -1, full.shape[-1]),
                        tokens)
