"""Token merging (ToMe, Bolya et al., ICLR 2023): bipartite soft matching,
size-weighted merging, proportional attention and unmerging, in pure torch
(``docs/tome.md``).

Tokens are ``(B, T, C)``; the first ``E`` of them (class, distillation) are
protected. Each merge removes ``r`` tokens from every image, so a batch
stays rectangular.
"""
import math
from typing import NamedTuple

import torch

from mmvitaccel.ops.flops import attention_flops, layer_norm_flops, mlp_flops

__all__ = [
    'TokenMerge', 'tome_schedule', 'bipartite_matching', 'merge_tokens',
    'merge_weighted', 'merge_slots', 'merge_index', 'unmerge_tokens',
    'source_matrix', 'proportional_bias', 'tome_token_counts',
    'tome_vit_flops', 'tome_r_for_flops', 'merge_dropped'
]


class TokenMerge(NamedTuple):
    """One bipartite matching of ``T`` tokens: set A the even positions,
    set B the odd ones (``T_a = ceil(T / 2)``, ``T_b = floor(T / 2)``).

    Attributes:
        unm_idx (Tensor): ``(B, T_a - r, 1)`` the A tokens kept.
        src_idx (Tensor): ``(B, r, 1)`` the A tokens merged away.
        dst_idx (Tensor): ``(B, r, 1)`` the B token each one merges into.
        distill_token (bool): B's first token is a distillation token: the
            merged order is ``[unm_0, dst_0, unm_1.., dst_1..]``.
    """
    unm_idx: torch.Tensor
    src_idx: torch.Tensor
    dst_idx: torch.Tensor
    distill_token: bool = False


def tome_schedule(r, num_layers):
    """Tokens merged in each layer, as ToMe gives ``r``.

    Args:
        r (int | tuple[int, float] | list[int]): an int: the same ``r`` in
            every layer; ``(r, inflect)``: the line from
            ``int(r (1 - inflect))`` to ``2 r - int(r (1 - inflect))``
            (``inflect`` 0 is constant, > 0 merges more later); a list:
            one value a layer (zeros appended to ``num_layers``).
        num_layers (int): the layers ``L``.

    Returns:
        list[int]: ``L`` values, each >= 0.

    Raises:
        ValueError: a negative ``r``, a list longer than ``L``, or another
            type.
    """
    if isinstance(r, bool) or not isinstance(r, (int, tuple, list)):
        raise ValueError(f'r must be an int, (r, inflect) or a list of ints, '
                         f'got {r!r}')
    if isinstance(r, list):
        if len(r) > num_layers or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 0
                for v in r):
            raise ValueError(f'a list r gives at most {num_layers} ints >= 0 '
                             f'(one a layer), got {r!r}')
        return list(r) + [0] * (num_layers - len(r))
    inflect = 0.
    if isinstance(r, tuple):
        if len(r) != 2 or not isinstance(r[0], int) or isinstance(r[0], bool):
            raise ValueError(f'a tuple r is (r, inflect), got {r!r}')
        r, inflect = r
    if r < 0:
        raise ValueError(f'r must be >= 0, got {r}')
    lo = int(r * (1.0 - inflect))
    hi = 2 * r - lo
    step = (hi - lo) / max(num_layers - 1, 1)
    return [max(int(lo + step * i), 0) for i in range(num_layers)]


@torch.no_grad()
def bipartite_matching(metric, r, class_token=True, distill_token=False,
                       groups=None):
    """Bipartite soft matching: each A token's most similar B token
    (cosine), the ``r`` most similar edges merged.

    ``s_ij = a_i . b_j / (|a_i| |b_j|)``; protected tokens never leave A
    (class) or take a merge in B (distillation).

    Args:
        metric (Tensor): ``(B, T, d)`` keys averaged over heads.
        r (int): tokens to remove; at most ``(T - E) // 2`` are.
        class_token (bool): position 0 is a class token (set A).
        distill_token (bool): position 1 is a distillation token (set B).
        groups (Tensor, optional): ``(B, T)`` labels: a token merges only
            into one of its own label; the caller keeps ``r`` at most the
            A tokens that have such a partner
            (:func:`~mmvitaccel.ops.tome_window.window_merge_cap`).

    Returns:
        TokenMerge | None: None when nothing is merged.
    """
    protected = int(class_token) + int(distill_token)
    r = min(r, (metric.shape[1] - protected) // 2)
    if r <= 0:
        return None
    # a zero token (padding) has cosine 0 with every token, not NaN
    metric = metric / metric.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    a, b = metric[..., ::2, :], metric[..., 1::2, :]
    scores = a @ b.transpose(-1, -2)
    if groups is not None:
        scores = scores.masked_fill(
            groups[..., ::2, None] != groups[..., None, 1::2], -math.inf)
    if class_token:
        scores[..., 0, :] = -math.inf
    if distill_token:
        scores[..., :, 0] = -math.inf
    node_max, node_idx = scores.max(dim=-1)
    edge_idx = node_max.argsort(dim=-1, descending=True)[..., None]
    unm_idx = edge_idx[..., r:, :]
    src_idx = edge_idx[..., :r, :]
    dst_idx = node_idx[..., None].gather(dim=-2, index=src_idx)
    if class_token:  # the class token first again
        unm_idx = unm_idx.sort(dim=1)[0]
    return TokenMerge(unm_idx, src_idx, dst_idx, distill_token)


def merge_tokens(merge, x):
    """Sum each merged A token into its B token.

    Args:
        merge (TokenMerge): the matching.
        x (Tensor): ``(B, T, c)``.

    Returns:
        Tensor: ``(B, T - r, c)``: kept A tokens, then B tokens.
    """
    src, dst = x[..., ::2, :], x[..., 1::2, :]
    n, t1, c = src.shape
    r = merge.src_idx.shape[1]
    unm = src.gather(dim=-2, index=merge.unm_idx.expand(n, t1 - r, c))
    src = src.gather(dim=-2, index=merge.src_idx.expand(n, r, c))
    dst = dst.scatter_add(-2, merge.dst_idx.expand(n, r, c), src)
    if merge.distill_token:
        return torch.cat([unm[:, :1], dst[:, :1], unm[:, 1:], dst[:, 1:]],
                         dim=1)
    return torch.cat([unm, dst], dim=1)


def merge_weighted(merge, x, size=None):
    """Size-weighted merge: ``x' = sum(s x) / sum(s)``, ``s' = sum(s)``.

    Args:
        merge (TokenMerge): the matching.
        x (Tensor): ``(B, T, C)``.
        size (Tensor, optional): ``(B, T, 1)`` patches per token; ones.

    Returns:
        tuple[Tensor, Tensor]: ``(B, T - r, C)`` and sizes ``(B, T - r, 1)``.
    """
    if size is None:
        size = torch.ones_like(x[..., :1])
    else:
        x = x * size
    # one merge of [s x, s]: the sums share the gathers and the scatter
    merged = merge_tokens(merge, torch.cat([x, size], dim=-1))
    size = merged[..., -1:]
    return merged[..., :-1] / size, size


def merge_slots(merge, num_tokens):
    """Where each token goes: its position after :func:`merge_tokens`.

    Args:
        merge (TokenMerge): the matching of ``num_tokens`` tokens.
        num_tokens (int): ``T``.

    Returns:
        Tensor: ``(B, T)`` int64, in ``[0, T - r)``.
    """
    unm, src, dst = (i[..., 0] for i in merge[:3])
    B, kept = unm.shape
    num_b = num_tokens // 2
    device = unm.device
    pos_unm = torch.arange(kept, device=device)
    pos_b = kept + torch.arange(num_b, device=device)
    if merge.distill_token:  # [unm_0, dst_0, unm_1.., dst_1..]
        pos_unm = pos_unm + (pos_unm > 0).long()
        pos_b = torch.where(pos_b == kept, torch.ones_like(pos_b), pos_b)
    slot_a = unm.new_empty(B, num_tokens - num_b)
    slot_a.scatter_(1, unm, pos_unm.expand(B, kept))
    slot_a.scatter_(1, src, pos_b[dst])
    slot = torch.empty(B, num_tokens, dtype=torch.long, device=device)
    slot[:, 0::2] = slot_a
    slot[:, 1::2] = pos_b.expand(B, num_b)
    return slot


def merge_index(merge, index, num_tokens):
    """Follow the original tokens through a merge.

    Args:
        merge (TokenMerge): the matching of ``num_tokens`` tokens.
        index (Tensor | None): ``(B, T0)`` the token holding each original
            token; None: the identity (``T0 = num_tokens``).
        num_tokens (int): ``T``, the tokens merged.

    Returns:
        Tensor: ``(B, T0)`` the merged token holding each original one.
    """
    slot = merge_slots(merge, num_tokens)
    return slot if index is None else slot.gather(1, index)


def unmerge_tokens(x, index):
    """Each original token gets the value of the token holding it.

    Args:
        x (Tensor): ``(B, T, C)`` merged tokens.
        index (Tensor | None): ``(B, T0)`` from :func:`merge_index`; None
            returns ``x``.

    Returns:
        Tensor: ``(B, T0, C)``.
    """
    if index is None:
        return x
    return x.gather(1, index[..., None].expand(-1, -1, x.shape[-1]))


def source_matrix(index, num_tokens):
    """ToMe's ``source``: which original tokens each token holds.

    Args:
        index (Tensor): ``(B, T0)`` from :func:`merge_index`.
        num_tokens (int): ``T``, the current tokens.

    Returns:
        Tensor: ``(B, T, T0)`` 0/1, each column one 1.
    """
    return torch.nn.functional.one_hot(index, num_tokens).transpose(1, 2)


def proportional_bias(size):
    """Proportional attention: ``softmax(q k^T / sqrt(d) + log s)``.

    Args:
        size (Tensor): ``(B, T, 1)`` patches per token.

    Returns:
        Tensor: ``(B, 1, 1, T)`` the additive logit bias ``log s``.
    """
    return size.log()[:, None, None, :, 0]


def tome_token_counts(num_tokens, schedule, protected=1):
    """Tokens entering each layer's MLP and leaving it.

    Args:
        num_tokens (int): ``T`` at the first layer (extra tokens included).
        schedule (Sequence[int]): ``r`` a layer (:func:`tome_schedule`).
        protected (int): ``E``, the tokens never merged.

    Returns:
        list[tuple[int, int]]: per layer ``(T_l, T_l - r_l')``, ``r_l' =
        min(r_l, (T_l - E) // 2)``.
    """
    counts, t = [], num_tokens
    for r in schedule:
        merged = max(min(r, (t - protected) // 2), 0)
        counts.append((t, t - merged))
        t -= merged
    return counts


def tome_vit_flops(num_tokens, schedule, embed_dims, feedforward_channels,
                   num_heads, protected=1):
    """FLOPs of ViT layers with ToMe (the counter's convention,
    ``ops/flops.py``): attention on ``T_l`` tokens, matching ``ceil(T_l / 2)
    floor(T_l / 2) d_h`` where a layer merges, ``ln2`` and MLP on
    ``T_l - r_l``.

    Args:
        num_tokens (int): ``T`` at the first layer.
        schedule (Sequence[int]): ``r`` a layer.
        embed_dims (int): ``C``.
        feedforward_channels (int): ``F``.
        num_heads (int): ``h`` (the metric has ``d_h = C / h`` channels).
        protected (int): ``E``.

    Returns:
        int: FLOPs of the layers.
    """
    C, total = embed_dims, 0
    for t, kept in tome_token_counts(num_tokens, schedule, protected):
        total += layer_norm_flops(t, C) + attention_flops(t, C)
        if kept < t:
            total += ((t + 1) // 2) * (t // 2) * (C // num_heads)
        total += layer_norm_flops(kept, C) + mlp_flops(
            kept, C, feedforward_channels)
    return total


def tome_r_for_flops(flops_ratio, num_tokens, num_layers, embed_dims,
                     feedforward_channels, num_heads, protected=1):
    """The smallest constant ``r`` whose layers cost at most
    ``flops_ratio`` of the unmerged ones (:func:`tome_vit_flops`).

    Args:
        flops_ratio (float): the target, in ``(0, 1]``.
        num_tokens (int): ``T`` at the first layer.
        num_layers (int): ``L``.
        embed_dims (int): ``C``.
        feedforward_channels (int): ``F``.
        num_heads (int): ``h``.
        protected (int): ``E``.

    Returns:
        int: ``r``.

    Raises:
        ValueError: a ratio outside ``(0, 1]``, or one no ``r`` reaches
            (the message gives the lowest reachable).
    """
    if not 0 < flops_ratio <= 1:
        raise ValueError(f'flops_ratio must be in (0, 1], got {flops_ratio}')
    args = (embed_dims, feedforward_channels, num_heads, protected)
    dense = tome_vit_flops(num_tokens, [0] * num_layers, *args)
    best = None
    for r in range((num_tokens - protected) // 2 + 1):
        ratio = tome_vit_flops(num_tokens, [r] * num_layers, *args) / dense
        if ratio <= flops_ratio:
            return r
        best = ratio if best is None else min(best, ratio)
    raise ValueError(f'no r reaches flops_ratio={flops_ratio} on this host '
                     f'({num_tokens} tokens, {num_layers} layers); the '
                     f'lowest is {best:.3f}')


def merge_dropped(x, keep, alive=None, size=None):
    """Prune and merge: each dropped token joins its most similar kept token
    (cosine of the features), size-weighted, instead of being discarded.

    ``x'_j = (s_j x_j + sum_{i -> j} s_i x_i) / (s_j + sum_{i -> j} s_i)``
    for a kept ``j``; ``i -> j``: the dropped ``i`` whose most similar kept
    token is ``j``.

    Args:
        x (Tensor): ``(B, K, C)`` patch tokens.
        keep (Tensor): ``(B, K)`` bool, the tokens kept.
        alive (Tensor, optional): ``(B, K)`` bool, the tokens taking part
            (False: padding or pruned before); all by default.
        size (Tensor, optional): ``(B, K, 1)`` patches per token; ones.

    Returns:
        tuple[Tensor, Tensor]: ``x'`` ``(B, K, C)`` (kept rows merged, the
        rest as they were) and the sizes ``(B, K, 1)``.
    """
    if size is None:
        size = torch.ones_like(x[..., :1])
    keep = keep if alive is None else keep & alive
    dropped = ~keep if alive is None else alive & ~keep
    unit = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    sim = (unit @ unit.transpose(1, 2)).masked_fill(~keep[:, None, :],
                                                    -math.inf)
    target = sim.argmax(dim=-1, keepdim=True)  # (B, K, 1)
    kept_w = size * keep[..., None]
    moved_w = size * dropped[..., None]
    total = (x * kept_w).scatter_add(1, target.expand_as(x), x * moved_w)
    weight = kept_w.scatter_add(1, target, moved_w)
    merged = total / weight.clamp_min(1e-12)
    return (torch.where(keep[..., None], merged, x),
            torch.where(keep[..., None], weight, size))
