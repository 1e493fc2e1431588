"""Keep masks and keep counts: the selectors of token pruning (SaiT, AS-ViT).

Split from :mod:`mmvitaccel.ops.token_pruning` (which, with
:mod:`mmvitaccel.ops`, still exports every name). Conventions there: scores
are ``(B, N)`` over the patch tokens; a keep mask is ``(B, N)`` bool (or
float, the straight-through one) over them.

Three selectors:

* :func:`value_keep_count` / :func:`value_keep_counts` /
  :func:`topk_keep_mask` (SaiT value): the ``K`` highest scores,
  ``K = round(rho * (N + 1))`` tokens *with* the class token, i.e. ``K - 1``
  patch tokens;
* :func:`mass_keep_mask` (SaiT mass): the fewest tokens whose cumulative
  (sorted, normalised) score reaches ``M_th``;
* :func:`threshold_keep_mask` (AS-ViT): ``M_i = sigmoid((S_i - theta) /
  tau)``, ``tau = 1e-4``, hardened to ``S_i > theta`` with a straight-through
  estimator (the forward value is the hard mask, the gradient the soft one).

And AS-ViT's batched inference, every image cut to the batch-mean count
(:func:`batch_mean_kept_index`, :func:`batch_mean_keep_mask`).

Plain torch: no registry, no OpenMMLab imports.
"""
import math

import torch

from mmvitaccel.ops.host_sync import host_read

__all__ = [
    'value_keep_count', 'value_keep_counts', 'topk_keep_mask',
    'mass_keep_mask', 'threshold_keep_mask', 'batch_mean_kept_index',
    'batch_mean_keep_mask'
]


def value_keep_count(num_patches, density):
    """Patch tokens kept by SaiT's value selector.

    ``K = round(rho * (N + 1))`` counts the class token, so ``K - 1`` patch
    tokens are kept (at least one, at most ``N``); ``rho = 1`` keeps all.
    Halves round up (``floor(x + 0.5)``), not to even.

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
        valid (Tensor, optional): ``(B, N)`` bool; invalid tokens (already
            pruned) are never kept.

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
    """SaiT mass selector: the fewest tokens reaching a cumulative score.

    With ``s`` the scores normalised to sum one and sorted descending,
    ``K = min{k : sum_{j <= k} s_j >= M_th}``; ``M_th >= 1`` keeps every
    token.

    Args:
        scores (Tensor): ``(B, N)`` non-negative scores.
        mass_threshold (float): ``M_th`` in ``(0, 1]``.
        valid (Tensor, optional): ``(B, N)`` bool; invalid tokens have no
            mass and are never kept.

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
    # a tolerance so that rounding in the cumulative sum does not add a token
    count = ((cumulative < mass_threshold - 1e-6).sum(dim=-1) + 1).clamp(
        max=N)
    return topk_keep_mask(scores, count, valid), count


def threshold_keep_mask(scores, threshold, tau=1e-4, valid=None):
    """AS-ViT learnable threshold with a straight-through estimator.

    ``M_soft = sigmoid((S - theta) / tau)``, ``M_hard = [S > theta]``,
    returned as ``M_hard + M_soft - stopgrad(M_soft)``: the value is the
    hard mask, the gradient (to ``S`` and ``theta``) the soft one. The
    highest-scoring token is always kept so that no image loses all of its
    patches.

    Args:
        scores (Tensor): ``(B, N)``.
        threshold (Tensor | float): ``theta``, a scalar (learnable).
        tau (float): the temperature; ``1e-4`` in AS-ViT.
        valid (Tensor, optional): ``(B, N)`` bool of tokens still alive;
            the result is multiplied by it.

    Returns:
        Tensor: ``(B, N)`` float mask (values 0/1).
    """
    if tau <= 0:
        raise ValueError(f'tau must be positive, got {tau}')
    hard = (scores > threshold)
    masked = scores if valid is None else scores.masked_fill(
        ~valid, float('-inf'))
    # one-hot of the best token (a comparison: also for a data-dependent N)
    best = torch.arange(scores.shape[-1], device=scores.device) == \
        masked.argmax(dim=-1, keepdim=True)
    hard = (hard | best).to(scores.dtype)
    learns = torch.is_grad_enabled() and (scores.requires_grad or (
        torch.is_tensor(threshold) and threshold.requires_grad))
    if learns:
        soft = torch.sigmoid((scores - threshold) / tau)
        # (soft - stopgrad(soft)) is exactly 0: the value is the hard mask
        # to the bit (hard + soft - soft would round to 1 - ulp)
        mask = hard + (soft - soft.detach())
    else:  # nothing to differentiate: the hard mask alone
        mask = hard
    return mask if valid is None else mask * valid.to(mask.dtype)


def batch_mean_kept_index(scores, keep):
    """AS-ViT batched inference: every image keeps the batch-mean count of
    tokens, its highest-scoring ones; their positions, ascending.

    ``K = round(mean_b |keep_b|)`` (at least 1); each image keeps its top
    ``K`` scores. The mean is read on the host
    (:func:`~.host_sync.host_read`, ``'batch_mean_token_count'``; ``N`` on
    the ``meta`` device). Every row gets the same ``K``, so nothing is
    padded: a caller that cuts every image to the mean at each location
    keeps equal alive counts, and ``K`` (a mean of counts at most that
    count) never exceeds them.

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
    """:func:`batch_mean_kept_index` as a ``(B, N)`` bool mask, ``K``
    tokens per row.

    Args:
        scores (Tensor): ``(B, N)``.
        keep (Tensor): ``(B, N)`` bool per-image keep masks.

    Returns:
        Tensor: ``(B, N)`` bool.
    """
    index = batch_mean_kept_index(scores, keep)
    return torch.zeros_like(keep, dtype=torch.bool).scatter(1, index, True)


def value_keep_counts(alive, density):
    """:func:`value_keep_count` per image, for tensors of alive counts.

    Computed in int64, not in float64 (which MPS lacks and most GPUs run
    slowly), with the result of :func:`value_keep_count`'s float64
    expression, roundings included, for every density and every count
    below ``2**31`` (:func:`_float64_round_half_up`). Exact rational
    arithmetic would differ: ``rho = 0.7``, ``n = 4`` gives ``fl(0.7 *
    5) = 3.5`` in float64 (3 patch tokens kept) but ``0.7 * 5 < 3.5``
    exactly, for ``0.7`` is stored a little low (2 kept).

    Args:
        alive (Tensor): ``(B,)`` integer, patch tokens still alive (each
            below ``2**31``).
        density (float): ``rho`` in ``(0, 1]``.

    Returns:
        Tensor: ``(B,)`` long, ``clamp(floor(rho * (n + 1) + 0.5) - 1, 1,
        n)``, ``rho * (n + 1)`` and the ``+ 0.5`` rounded to float64.
    """
    if not 0. < density <= 1.:
        raise ValueError(f'density must be in (0, 1], got {density}')
    alive = alive.long()
    total = _float64_round_half_up(alive + 1, float(density))
    return torch.minimum(alive, (total - 1).clamp_min(1))


#: limbs of the 54-bit numerator: two halves of 27 bits, whose products
#: with counts below ``2**31`` stay below ``2**58`` (int64)
_LIMB = 27


def _float64_round_half_up(t, density):
    """``floor(fl(fl(rho * t) + 0.5))`` in int64 for ``1 <= t <= 2**31``,
    where ``fl`` rounds to the nearest float64 (ties to even): the same
    integer wherever it is 2 or more; where float64 gives 1 this may give 0
    (the caller's clamp makes them one).

    With ``rho = m / 2**s`` exactly (``float.as_integer_ratio``; ``s >= 28``
    after scaling ``m``), ``x = rho * t = m t / 2**s`` and ``q = floor(x +
    1/2)``, ``x < q + 1/2``. The float64 value is ``q``, or ``q + 1``
    where ``fl(x)`` rounds up to the half ``q + 1/2``: the double below it
    lies ``2**(E - 52)`` lower (``E = floor(log2 q)``, ``q >= 1``), so
    ``fl(x) = q + 1/2`` iff ``R = 2**s (q + 1/2) - m t <= 2**(s + E - 53)``
    (a tie goes to ``q + 1/2``, whose 53-bit significand ``(2q + 1)
    2**(51 - E)`` is even for ``E <= 50``). Adding ``0.5`` rounds too, but
    never across an integer once ``fl(x) >= 1/2``. ``m t`` (up to 85 bits)
    is held as ``hi 2**27 + lo``; ``R = 2**27 (2**(s - 27) - (H mod
    2**(s - 27))) - lo`` with ``H = hi + 2**(s - 28)``, and ``s + E - 53 <=
    32`` (``x < 2**(85 - s)``), so ``R`` is only needed up to ``2**32``.

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
    # R, capped at 64 2**27 - lo > 2**32: beyond, it exceeds every
    # 2**slack alike
    below_half = to_half.clamp_max(64) * (1 << _LIMB) - lo
    bound = torch.bitwise_left_shift(torch.ones_like(slack),
                                     slack.clamp(0, 62))
    rounds_up = (q > 0) & (slack >= 0) & (below_half <= bound)
    return q + rounds_up.long()


def _floor_log2(q):
    """``floor(log2 q)`` of integers ``1 <= q < 2**32`` (0 for 0), by
    bisection of the bit length in integers.

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
