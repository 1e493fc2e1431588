"""GLAD ``Y = GELU(LN(W X)) + E``, its FLOPs, and the search maximising ``AM =
sum_{l > P} E_l(m_l)`` under ``eta`` (``docs/dgssa_glad_design.md``)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from mmvitaccel.ops.checks import check_choice
from mmvitaccel.ops.flops import (layer_norm_flops, linear_flops,
                                  vit_layer_flops)

GLAD_INITS = ('pool', 'random')


class GLAD(nn.Module):
    """Global aggregation: ``Y = GELU(LN(W X)) + E``.

    Args:
        in_tokens (int): ``N``.
        out_tokens (int): ``M``, ``1 <= M < N``.
        dims (int): channels ``d``.
        init (str): ``W`` at start: ``'pool'`` (average of consecutive
            raster-order tokens) or ``'random'`` (truncated normal, .02).
        eps (float): LayerNorm epsilon.
    """

    def __init__(self, in_tokens, out_tokens, dims, init='pool', eps=1e-6):
        super().__init__()
        if not 1 <= out_tokens < in_tokens:
            raise ValueError(f'GLAD must reduce the tokens: got {in_tokens} '
                             f'-> {out_tokens}')
        check_choice('GLAD init', init, GLAD_INITS)
        self.in_tokens = in_tokens
        self.out_tokens = out_tokens
        self.init = init
        self.weight = nn.Parameter(torch.empty(out_tokens, in_tokens))
        self.norm = nn.LayerNorm(dims, eps=eps)
        self.pos_embed = nn.Parameter(torch.zeros(1, out_tokens, dims))
        self.reset_parameters()

    def reset_parameters(self):
        """``W`` by ``init``; ``E`` truncated normal (.02); LN identity."""
        with torch.no_grad():
            if self.init == 'pool':
                self.weight.zero_()
                for i in range(self.out_tokens):
                    lo = i * self.in_tokens // self.out_tokens
                    hi = -(-(i + 1) * self.in_tokens // self.out_tokens)
                    self.weight[i, lo:hi] = 1.0 / (hi - lo)
            else:
                nn.init.trunc_normal_(self.weight, std=.02)
        nn.init.trunc_normal_(self.pos_embed, std=.02)
        self.norm.reset_parameters()

    def forward(self, x):
        """Args:
            x (Tensor): ``(B, N, d)``.

        Returns:
            Tensor: ``(B, M, d)``.
        """
        if x.shape[1] != self.in_tokens:
            raise ValueError(f'GLAD built for {self.in_tokens} tokens, got '
                             f'{x.shape[1]}')
        y = torch.einsum('mn,bnd->bmd', self.weight, x)  # W X
        return F.gelu(self.norm(y)) + self.pos_embed  # GELU(LN(WX)) + E


def layer_flops(n, d, static=False):
    """Multiply-adds of one ViT layer (MLP ratio 4) on ``n`` tokens:
    dynamic ``12 n d^2 + 2 n^2 d + 10 n d``, DGSSA ``10 n d^2 + n^2 d +
    10 n d``.

    Args:
        n (int): tokens.
        d (int): channels.
        static (bool): DGSSA instead of dynamic attention.

    Returns:
        int: multiply-adds.
    """
    # DGSSA has no Q, K and no scores: a query/key width of 0
    return vit_layer_flops(n, d, 4 * d, qk_dims=0 if static else None)


def glad_flops(n, m, d, extra_tokens=0):
    """Multiply-adds of a GLAD from ``n`` to ``m`` tokens: ``W X`` and LN.

    Args:
        n (int): tokens before (extra tokens included).
        m (int): tokens after (extra tokens included).
        d (int): channels.
        extra_tokens (int): class tokens, passed through unchanged.

    Returns:
        int: multiply-adds.
    """
    n, m = n - extra_tokens, m - extra_tokens
    # W X is a linear map over the token axis: d columns of n -> m
    return linear_flops(d, n, m) + layer_norm_flops(m, d)


def architecture_flops(num_tokens, dims, num_layers, static_layers,
                       glad_layers=(), glad_tokens=(), extra_tokens=0):
    """Multiply-adds of a ViT with DGSSA and GLADs (no stem, final norm, head).

    Args:
        num_tokens (int): ``n_0``, extra tokens included.
        dims (int): ``d``.
        num_layers (int): ``L``.
        static_layers (Sequence[int]): 0-based DGSSA layers.
        glad_layers (Sequence[int]): 0-based layers that start with a GLAD.
        glad_tokens (Sequence[int]): token count after each GLAD.
        extra_tokens (int): class tokens.

    Returns:
        int: multiply-adds.
    """
    counts = token_counts(num_tokens, num_layers, glad_layers, glad_tokens)
    flops, prev = 0, num_tokens
    for l, n in enumerate(counts):
        if n != prev:
            flops += glad_flops(prev, n, dims, extra_tokens)
        flops += layer_flops(n, dims, l in static_layers)
        prev = n
    return flops


def token_counts(num_tokens, num_layers, glad_layers, glad_tokens):
    """Tokens of each of the ``L`` layers: ``n_0``, then each GLAD's count."""
    if len(glad_layers) != len(glad_tokens):
        raise ValueError(f'{len(glad_layers)} GLAD layers but '
                         f'{len(glad_tokens)} token counts')
    where = dict(zip(glad_layers, glad_tokens))
    counts, n = [], num_tokens
    for l in range(num_layers):
        n = where.get(l, n)
        counts.append(n)
    return counts


def retained_energy(sigma, power=2):
    """``E(m) = sum_{i < m} sigma_i^p / sum_i sigma_i^p`` for every ``m``.

    Args:
        sigma (Tensor | Sequence[float]): expected singular values ``(N, )``.
        power (float): ``p``; 2 is energy.

    Returns:
        list[float]: ``N + 1`` values, ``E(0) = 0`` ... ``E(N) = 1``.
    """
    s = torch.as_tensor(sigma, dtype=torch.float64).abs().pow(power)
    s = s.sort(descending=True).values
    total = float(s.sum())
    if total <= 0:
        raise ValueError('singular values are all zero')
    return [0.0] + (s.cumsum(0) / total).tolist()


def accuracy_metric(sigmas, num_tokens, static_depth, glad_layers,
                    glad_tokens, power=2):
    """AM of an architecture: ``sum_{l > P} E_l(m_l)``.

    Args:
        sigmas (Sequence): per layer, expected singular values ``(N, )``.
        num_tokens (int): ``n_0``.
        static_depth (int): ``P``; layers ``1..P`` are DGSSA.
        glad_layers (Sequence[int]): GLAD layers.
        glad_tokens (Sequence[int]): their token counts.
        power (float): see :func:`retained_energy`.

    Returns:
        float: AM.
    """
    counts = token_counts(num_tokens, len(sigmas), glad_layers, glad_tokens)
    return sum(
        retained_energy(sigmas[l], power)[min(counts[l], len(sigmas[l]))]
        for l in range(static_depth + 1, len(sigmas)))


def _pareto(entries):
    """The entries ``(flops, am, path)`` on the Pareto front."""
    entries.sort(key=lambda e: (e[0], -e[1]))
    out, best = [], -1.0
    for e in entries:
        if e[1] > best + 1e-12:
            out.append(e)
            best = e[1]
    return out


def glad_search(sigmas, num_tokens, dims, static_depth, max_glad, eta,
                candidates=None, extra_tokens=1, power=2):
    """The GLAD layers and token counts that maximise AM under ``eta``:
    exact dynamic programming over layers, state ``(tokens, GLADs used)``,
    a Pareto front of (FLOPs, AM) per state.
    Args:
        sigmas (Sequence): ``L`` per-layer expected singular values.
        num_tokens (int): ``n_0`` (extra tokens included).
        dims (int): ``d``.
        static_depth (int): ``P``.
        max_glad (int): ``Q``.
        eta (float): FLOPs ratio bound.
        candidates (Sequence[int], optional): allowed counts after a GLAD
            (extra tokens included); default all of ``extra + 1 .. n_0 - 1``.
        extra_tokens (int): class tokens, never aggregated.
        power (float): see :func:`retained_energy`.

    Returns:
        dict: ``glad_layers``, ``glad_tokens``, ``tokens``, ``am``,
        ``flops``, ``dense_flops``, ``ratio``; None if none meets ``eta``.
    """
    L = len(sigmas)
    if not 0 <= static_depth < L:
        raise ValueError(f'P={static_depth} must be in 0..{L - 1}')
    if candidates is None:
        candidates = range(extra_tokens + 1, num_tokens)
    candidates = sorted({int(c) for c in candidates
                         if extra_tokens < c < num_tokens})
    energy = [retained_energy(s, power) for s in sigmas]

    def gain(l, n):
        return energy[l][min(n, len(energy[l]) - 1)]

    dense = L * layer_flops(num_tokens, dims)
    budget = eta * dense
    static = range(1, static_depth + 1)
    fixed = sum(layer_flops(num_tokens, dims, l in static)
                for l in range(static_depth + 1))
    low = min(candidates) if candidates else num_tokens

    def lower_bound(l, n, q):
        """FLOPs the layers after ``l`` need at least."""
        count = n if q == max_glad else min(n, low)
        return (L - 1 - l) * layer_flops(count, dims)

    states = {(num_tokens, 0): [(fixed, 0.0, ())]}
    for l in range(static_depth + 1, L):
        nxt = {}
        for (n, q), front in states.items():
            for flops, am, path in front:
                cost = flops + layer_flops(n, dims)
                if cost + lower_bound(l, n, q) <= budget:
                    nxt.setdefault((n, q), []).append(
                        (cost, am + gain(l, n), path))
                if q == max_glad:
                    continue
                for m in candidates:
                    if m >= n:
                        break
                    cost = flops + glad_flops(n, m, dims, extra_tokens) + \
                        layer_flops(m, dims)
                    if cost + lower_bound(l, m, q + 1) <= budget:
                        nxt.setdefault((m, q + 1), []).append(
                            (cost, am + gain(l, m), path + ((l, m), )))
        states = {k: _pareto(v) for k, v in nxt.items()}
    best = None
    for front in states.values():
        for e in front:
            if best is None or e[1] > best[1] + 1e-12 or (
                    abs(e[1] - best[1]) <= 1e-12 and e[0] < best[0]):
                best = e
    if best is None:
        return None
    flops, am, path = best
    layers = [p[0] for p in path]
    tokens = [p[1] for p in path]
    return dict(
        glad_layers=layers,
        glad_tokens=tokens,
        tokens=token_counts(num_tokens, L, layers, tokens),
        am=am,
        flops=flops,
        dense_flops=dense,
        ratio=flops / dense)
