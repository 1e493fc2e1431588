"""Selectors of token pruning (SaiT value and mass, AS-ViT threshold and
batch mean); scores and keep masks are ``(B, N)`` over the patch tokens."""
import math

import torch

from mmvitaccel.ops.host_sync import host_read

__all__ = [
    'value_keep_count', 'value_keep_counts', 'topk_keep_mask',
    'mass_keep_mask', 'threshold_keep_mask', 'batch_mean_kept_index',
    'batch_mean_keep_mask'
]


def value_keep_count(num_patches, density):
    """Patch tokens kept by SaiT's value selector: ``K = round(rho (N + 1))``
    with the class token, so ``K - 1`` (in ``[1, N]``); halves round up.

    Args:
        num_patches (int): ``N``.
        density (float): ``rho`` in ``(0, 1]``.

    Returns:
        int: the number of patch tokens kept.
    """
    if not 0. < density <= 1.:
        raise ValueError(f'density must be in (0, 1], got {density}')
    total = int(math.floor(density * (num_patches + 1) + 0.5))
    return min(num_patches, max(1, total - 1))


def topk_keep_mask(scores, count, valid=None):
    """Keep the ``count`` highest scores of each row.

    Args:
        scores (Tensor): ``(B, N)``.
        count (int | Tensor): an int, or ``(B,)`` per-image counts.
        valid (Tensor, optional): ``(B, N)`` bool; invalid never kept.

    Returns:
        Tensor: ``(B, N)`` bool keep mask.
    """
    if valid is not None:
        scores = scores.masked_fill(~valid, float('-inf'))
    order = scores.argsort(dim=-1, descending=True)
    ranks = torch.empty_like(order)
    ranks.scatter_(-1, order,
                   torch.arange(scores.shape[-1],
                                device=scores.device).expand_as(order))
    if not torch.is_tensor(count):
        count = torch.full((scores.shape[0], ), count, device=scores.device)
    keep = ranks < count[:, None]
    return keep if valid is None else keep & valid


def mass_keep_mask(scores, mass_threshold, valid=None):
    """SaiT's mass selector: ``K = min{k : sum_{j <= k} s_j >= M_th}``, ``s``
    the normalised scores sorted descending; ``M_th >= 1`` keeps all.

    Args:
        scores (Tensor): ``(B, N)`` non-negative scores.
        mass_threshold (float): ``M_th`` in ``(0, 1]``.
        valid (Tensor, optional): ``(B, N)`` bool; invalid never kept.

    Returns:
        tuple[Tensor, Tensor]: ``(B, N)`` bool keep mask and ``(B,)`` counts.
    """
    if not 0. < mass_threshold <= 1.:
        raise ValueError(
            f'mass_threshold must be in (0, 1], got {mass_threshold}')
    B, N = scores.shape
    if valid is not None:
        scores = scores.masked_fill(~valid, 0.)
    if mass_threshold >= 1.:
        keep = torch.ones(B, N, dtype=torch.bool, device=scores.device)
        keep = keep if valid is None else valid
        return keep, keep.sum(dim=-1)
    mass = scores / scores.sum(dim=-1, keepdim=True).clamp_min(1e-12)
    cumulative = mass.sort(dim=-1, descending=True)[0].cumsum(dim=-1)
    # tolerance: rounding in the cumsum must not add a token
    count = ((cumulative < mass_threshold - 1e-6).sum(dim=-1) + 1).clamp(
        max=N)
    return topk_keep_mask(scores, count, valid), count


def threshold_keep_mask(scores, threshold, tau=1e-4, valid=None):
    """AS-ViT's threshold: ``M_hard + M_soft - stopgrad(M_soft)``,
    ``M_soft = sigmoid((S - theta) / tau)``, ``M_hard = [S > theta]``; the
    best token is always kept.

    Args:
        scores (Tensor): ``(B, N)``.
        threshold (Tensor | float): ``theta``, a scalar (learnable).
        tau (float): the temperature; ``1e-4`` in AS-ViT.
        valid (Tensor, optional): ``(B, N)`` bool of tokens still alive.

    Returns:
        Tensor: ``(B, N)`` float mask (values 0/1).
    """
    if tau <= 0:
        raise ValueError(f'tau must be positive, got {tau}')
    hard = (scores > threshold)
    masked = scores if valid is None else scores.masked_fill(
        ~valid, float('-inf'))
    # one-hot of the best token (a comparison: works for a dynamic N)
    best = torch.arange(scores.shape[-1], device=scores.device) == \
        masked.argmax(dim=-1, keepdim=True)
    hard = (hard | best).to(scores.dtype)
    learns = torch.is_grad_enabled() and (scores.requires_grad or (
        torch.is_tensor(threshold) and threshold.requires_grad))
    if learns:
        soft = torch.sigmoid((scores - threshold) / tau)
        # soft - soft.detach() is exactly 0: the value is hard to the bit
        mask = hard + (soft - soft.detach())
    else:  # nothing to differentiate: the hard mask alone
        mask = hard
    return mask if valid is None else mask * valid.to(mask.dtype)


def batch_mean_kept_index(scores, keep):
    """AS-ViT's batched inference: each image keeps its top ``K = round(
    mean_b |keep_b|)`` tokens (read on the host, ``'batch_mean_token_count'``).

    Args:
        scores (Tensor): ``(B, N)``; ``-inf`` where a token may not be kept.
        keep (Tensor): ``(B, N)`` bool per-image keep masks.

    Returns:
        Tensor: ``(B, K)`` long, ascending within each row.
    """
    mean = host_read(keep.sum(dim=-1).float().mean(),
                     float(keep.shape[-1]), 'batch_mean_token_count')
    count = max(1, int(math.floor(mean + 0.5)))
    return scores.topk(count, dim=-1).indices.sort(dim=-1).values


def batch_mean_keep_mask(scores, keep):
    """:func:`batch_mean_kept_index` as a ``(B, N)`` bool mask.

    Args:
        scores (Tensor): ``(B, N)``.
        keep (Tensor): ``(B, N)`` bool per-image keep masks.

    Returns:
        Tensor: ``(B, N)`` bool.
    """
    index = batch_mean_kept_index(scores, keep)
    return torch.zeros_like(keep, dtype=torch.bool).scatter(1, index, True)


def value_keep_counts(alive, density):
    """:func:`value_keep_count` per image, in int64 with float64's roundings
    (``docs/token_pruning_design.md``, "ops/keep_masks.py").

    Args:
        alive (Tensor): ``(B,)`` integer, patch tokens alive (< ``2**31``).
        density (float): ``rho`` in ``(0, 1]``.

    Returns:
        Tensor: ``(B,)`` long.
    """
    if not 0. < density <= 1.:
        raise ValueError(f'density must be in (0, 1], got {density}')
    alive = alive.long()
    total = _float64_round_half_up(alive + 1, float(density))
    return torch.minimum(alive, (total - 1).clamp_min(1))


#: limb width: products with counts below ``2**31`` stay below ``2**58``
_LIMB = 27


def _float64_round_half_up(t, density):
    """``floor(fl(fl(rho * t) + 0.5))`` in int64.

    Args:
        t (Tensor): ``(B,)`` long, ``1 <= t <= 2**31``.
        density (float): ``rho`` in ``(0, 1]``.

    Returns:
        Tensor: ``(B,)`` long.
    """
    m, denominator = density.as_integer_ratio()
    s = denominator.bit_length() - 1
    if s > 89:  # rho < 2**-36: x < 2**-5, fl(x) + 0.5 < 1
        return torch.zeros_like(t)
    if s < 28:  # m <= 2**s: the scaled m stays below 2**54
        m, s = m << (28 - s), 28
    low_mask = (1 << _LIMB) - 1
    low = (m & low_mask) * t  # < 2**58
    hi = (m >> _LIMB) * t + (low >> _LIMB)  # < 2**58 + 2**31
    lo = low & low_mask
    shift = s - _LIMB  # 1 .. 62
    half_up = hi + (1 << (shift - 1))  # < 2**63
    q = half_up >> shift
    to_half = (1 << shift) - (half_up & ((1 << shift) - 1))  # 1 .. 2**shift
    exponent = _floor_log2(q)
    slack = shift + exponent - 26  # s + E - 53, at most 32
    # R, capped (beyond 2**32 it exceeds every 2**slack alike)
    below_half = to_half.clamp_max(64) * (1 << _LIMB) - lo
    bound = torch.bitwise_left_shift(torch.ones_like(slack),
                                     slack.clamp(0, 62))
    rounds_up = (q > 0) & (slack >= 0) & (below_half <= bound)
    return q + rounds_up.long()


def _floor_log2(q):
    """``floor(log2 q)`` for ``0 <= q < 2**32`` (0 for 0), by bisection.

    Args:
        q (Tensor): long.

    Returns:
        Tensor: long, same shape.
    """
    exponent = torch.zeros_like(q)
    for step in (16, 8, 4, 2, 1):
        exponent = exponent + step * (torch.bitwise_right_shift(
            q, exponent + step) > 0).long()
    return exponent
