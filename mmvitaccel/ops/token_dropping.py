"""Dropping pruned tokens for real, and scattering them back.

The batched execution of per-image keep counts at inference
(:mod:`mmvitaccel.ops.token_pruning` describes both executions): the kept
tokens of each image are gathered, a batch whose images keep different
counts is padded to its largest count with the padding masked out of the
keys (:func:`pad_kept_tokens`), and :func:`restore_tokens` puts tokens back
on the patch grid.

How many tokens an image keeps is decided by its data, so the size of the
gathered tokens is read on the host: one read per pruning step, through
:func:`~mmvitaccel.ops.host_sync.host_read` (``'kept_token_counts'``; on
the ``meta`` device every token is taken as kept).

Plain torch: no registry, no OpenMMLab imports.
"""
import torch

from mmvitaccel.ops.host_sync import host_read
from mmvitaccel.ops.tracing import is_capturing

__all__ = ['gather_tokens', 'kept_indices', 'pad_kept_tokens',
           'restore_tokens']


def _kept_order(keep):
    """:func:`kept_indices`, and whether a row is padded (a row keeps
    fewer than ``K_max`` tokens), with one host read of the counts."""
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
        tuple[Tensor, Tensor]: ``(B, K_max)`` indices (padding takes the
        row's pruned positions, ascending, so that a row's indices are
        distinct) and ``(B, K_max)`` bool validity; ``K_max`` is the largest
        count (at least 1; ``N`` on the ``meta`` device).
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

    Returns:
        tuple[Tensor, Tensor, Tensor]: tokens ``(B, E + K_max, C)``; the
        kept positions ``(B, K_max)`` (indices into the ``N`` patches); the
        key mask ``(B, E + K_max)`` bool, False at padding (``None`` when no
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
        full (Tensor): ``(B, N, C)`` features of every position (for the
            pruned ones: their features when they were dropped).
        tokens (Tensor): ``(B, K, C)`` the kept tokens.
        index (Tensor): ``(B, K)`` their positions in ``0 .. N-1``.
        valid (Tensor, optional): ``(B, K)`` bool; padding is not written.
            Pass None when nothing is padded: with a mask the padding slots
            are always resolved (no host read of the mask; an all-True mask
            gives the same result).

    Returns:
        Tensor: ``(B, N, C)``, ``full`` with ``full[b, index[b, k]] =
        tokens[b, k]``.
    """
    if valid is not None:
        # padding slots write the position's own value back
        tokens = torch.where(valid[..., None], tokens,
                             gather_tokens(full, index))
    return full.scatter(1, index[..., None].expand(-1, -1, full.shape[-1]),
                        tokens)
