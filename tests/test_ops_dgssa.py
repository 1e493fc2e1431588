"""DGSSA and GLAD token operators (mmvitaccel.ops.dgssa, mmvitaccel.ops.glad)."""
import copy
import itertools
import math

import pytest
import torch

from mmvitaccel.ops import (GLAD, INIT_MODES, AttentionStats,
                            accuracy_metric, architecture_flops,
                            attention_to_logits, glad_flops, glad_search,
                            init_static_logits, layer_flops, local_logits,
                            retained_energy, static_attention, token_counts)
from mmvitaccel.ops.dgssa import LOG_EPS

from .tolerance import assert_equal, rounding_tol


def random_attention(*shape):
    return torch.randn(*shape).mul(2).softmax(-1)


def test_static_attention_from_logits_of_attention():
    attn = random_attention(3, 10, 10)
    v = torch.randn(4, 3, 10, 8)
    out = static_attention(attention_to_logits(attn), v)
    # the logits give back A' = max(A, eps) / Z, Z <= 1 + N eps, so
    # |A' - A| <= eps + N eps A and |(A' - A) v| <= 2 N eps max|v|; float32
    # rounding: the logs (|log A'| <= log(1 / eps) < 14, carried into the
    # exponent twice), the renormalising and softmax sums of N terms and
    # the products with v: n = 2 N + 2 * 14 + 4 relative to max|v|
    N, vmax = 10, float(v.abs().max())
    torch.testing.assert_close(
        out, attn @ v, rtol=0,
        atol=2 * N * LOG_EPS * vmax +
        rounding_tol(torch.float32, 2 * N + 32, vmax))


def test_static_attention_masks():
    logits = torch.randn(2, 6, 6)
    v = torch.randn(3 * 4, 2, 6, 5)  # 3 images x 4 windows
    allowed = torch.rand(4, 6, 6) > 0.4
    allowed[:, torch.arange(6), torch.arange(6)] = True
    out = static_attention(logits, v, allowed)
    # bool and additive masks agree, masked keys get no weight
    additive = torch.zeros(4, 6, 6).masked_fill(~allowed, -1e4)
    # the bool mask adds the same -1e4 (MASKED_LOGIT) or -0.: bit-exact
    assert_equal(out, static_attention(logits, v, additive))
    noisy = v.clone().view(3, 4, 2, 6, 5)
    for w in range(4):
        for i in range(6):
            ref = (logits[:, i].masked_fill(~allowed[w, i], float('-inf'))
                   .softmax(-1)[None, :, None] @ noisy[:, w]).squeeze(-2)
            # other kernels on the same logits: the softmax's sum and the
            # product with v, N = 6 terms each, relative to max|v|
            torch.testing.assert_close(
                out.view(3, 4, 2, 6, 5)[:, w, :, i], ref, rtol=0,
                atol=rounding_tol(torch.float32, 2 * 6 + 4,
                                  float(noisy.abs().max())))
    with pytest.raises(ValueError, match='not a multiple'):
        static_attention(logits, v[:5], allowed)


@pytest.mark.parametrize('mode', INIT_MODES)
def test_init_modes(mode):
    mean = random_attention(4, 17, 17)
    logits = init_static_logits(mode, 4, 17, grid=(4, 4), extra_tokens=1,
                                mean_attention=mean)
    assert logits.shape == (4, 17, 17)
    if mode == 'dg':
        # softmax(log A') = A' = max(A, eps) / Z with 1 <= Z <= 1 + N eps:
        # |A' - A| <= eps + N eps A; float32 rounding relative to A: the
        # logs (|log A'| < 14, carried into the exponent twice), the
        # renormalising and softmax sums of N = 17 terms, a few roundings
        N = 17
        torch.testing.assert_close(
            logits.softmax(-1), mean, atol=LOG_EPS,
            rtol=N * LOG_EPS + rounding_tol(torch.float32, 2 * N + 32))
    elif mode == 'uniform':
        assert (logits == 0).all()
    elif mode == 'random':  # truncated at 2 std = 0.04: not rounding
        assert logits.std() > 0 and logits.abs().max() < 0.1


def test_init_errors():
    with pytest.raises(ValueError, match='unknown static attention init'):
        init_static_logits('mlp', 2, 5)
    with pytest.raises(ValueError, match='needs the mean attention'):
        init_static_logits('dg', 2, 5)
    with pytest.raises(ValueError, match='patch grid'):
        init_static_logits('local', 2, 5, grid=(3, 3))


def test_local_logits_attend_to_each_heads_offset():
    logits = local_logits(9, (5, 5))
    attn = logits.softmax(-1)
    centre = 2 * 5 + 2
    for k in range(9):
        dy, dx = k // 3 - 1, k % 3 - 1
        assert int(attn[k, centre].argmax()) == (2 + dy) * 5 + 2 + dx


def test_attention_stats():
    stats = AttentionStats(singular_values=True)
    same = random_attention(2, 6, 6)
    stats.update(same[None].expand(3, -1, -1, -1))
    # float64 sums of 3 copies of float32 values are exact, and so is / 3
    assert_equal(stats.mean, same)
    # E||A||^2 - ||mean||^2 of equal samples: only the float64 rounding of
    # the two sums of 36 squares (and 3 samples), <= 2 gamma_40 ||A||^2,
    # is left, and the metric is its root over ||mean||
    assert stats.difference.abs().max() <= math.sqrt(
        rounding_tol(torch.float64, 40))
    samples = random_attention(5, 2, 6, 6)
    stats = AttentionStats(singular_values=True)
    stats.update(samples[:2])
    stats.update(samples[2:])
    # the references in float64, as the statistics accumulate: both are
    # float64 values within a few float64 roundings of each other (the
    # one-pass variance cancels E||A||^2 - ||mean||^2, still ~1e-15 here),
    # rounded to float32: at most one float32 ulp apart, <= eps |x|
    x = samples.double()
    mean = x.mean(0)
    ref = ((x - mean).pow(2).sum((-1, -2)).mean(0).sqrt() /
           mean.pow(2).sum((-1, -2)).sqrt())
    ulp = dict(rtol=torch.finfo(torch.float32).eps, atol=0)
    torch.testing.assert_close(stats.mean, mean.float(), **ulp)
    torch.testing.assert_close(stats.difference, ref.float(), **ulp)
    torch.testing.assert_close(stats.expected_singular_values,
                               torch.linalg.svdvals(x).mean((0, 1)).float(),
                               **ulp)
    with pytest.raises(ValueError, match='no attention'):
        AttentionStats().mean


def test_glad_shapes_and_position_reembedding():
    glad = GLAD(196, 126, 32)
    x = torch.randn(2, 196, 32)
    y = glad(x)
    assert y.shape == (2, 126, 32)
    # Y = GELU(LN(W X)) + E, in float64 (einsum and @ are other kernels):
    # W X sums 196 terms (S = |W| |x|), LayerNorm over d = 32 channels
    # passes errors on scaled by about 1 / sigma (|LN| <= sqrt(d) times the
    # variance's relative error), GELU's slope is below 1.13
    g64, x64 = copy.deepcopy(glad).double(), x.double()
    with torch.no_grad():
        wx = g64.weight @ x64
        ref = torch.nn.functional.gelu(g64.norm(wx)) + g64.pos_embed
        sigma = (wx.var(-1, unbiased=False) + g64.norm.eps).sqrt()
        scale = 4 * (float((g64.weight.abs() @ x64.abs()).max() /
                           sigma.min()) + 32**0.5)
        torch.testing.assert_close(
            g64(x64), ref, rtol=0,
            atol=rounding_tol(torch.float64, 196 + 2 * 32 + 8, scale))
    # E re-embeds positions: the same token content at different output
    # positions differs by E. Exactly: the 'pool' rows hold 2 or 3 weights
    # 1/2 or fl(1/3), whose sums are exactly 1 in float32, so W 1 = 1, LN of
    # a constant row is 0 and GELU(0) = 0
    const = torch.ones(1, 196, 32)
    out = glad(const)[0]
    assert_equal(out - out[0], glad.pos_embed[0] - glad.pos_embed[0, 0])
    assert glad.pos_embed.std() > 0
    # 'pool' init: rows are averages of consecutive tokens (sums exactly 1)
    assert_equal(glad.weight.sum(1), torch.ones(126))
    y.sum().backward()
    assert glad.weight.grad.abs().sum() > 0 and \
        glad.pos_embed.grad.abs().sum() > 0
    with pytest.raises(ValueError, match='reduce'):
        GLAD(10, 10, 4)
    with pytest.raises(ValueError, match='built for 196'):
        glad(torch.randn(1, 195, 32))


def test_flops_formulas():
    d, n = 64, 50
    # the paper's formulas plus two LayerNorms (5 n d each, count_flops')
    assert layer_flops(n, d) == 12 * n * d * d + 2 * n * n * d + 10 * n * d
    assert layer_flops(n, d, static=True) == \
        10 * n * d * d + n * n * d + 10 * n * d
    assert glad_flops(50, 20, d, extra_tokens=1) == 49 * 19 * d + 5 * 19 * d
    flops = architecture_flops(n, d, 4, [1], [2], [20], extra_tokens=1)
    assert flops == (layer_flops(n, d) + layer_flops(n, d, True) +
                     glad_flops(n, 20, d, 1) + 2 * layer_flops(20, d))
    assert token_counts(197, 8, [3, 5, 7], [127, 77, 35]) == \
        [197, 197, 197, 127, 127, 77, 77, 35]
    # the paper's DeiT-S: DGSSA 1-2, GLAD at 3/5/7 to 127/77/35, eta ~0.5
    eta = architecture_flops(197, 384, 12, [1, 2], [3, 5, 7], [127, 77, 35],
                             1) / (12 * layer_flops(197, 384))
    assert 0.4 < eta < 0.5


def test_retained_energy():
    e = retained_energy([3., 0., 4.])
    # 16 / 25 and 25 / 25 are single correctly rounded divisions: exact
    assert e == [0, 16 / 25, 1, 1]


def brute_force(sigmas, n, d, P, Q, eta, candidates, extra=1):
    L = len(sigmas)
    dense = L * layer_flops(n, d)
    best = None
    for q in range(Q + 1):
        for layers in itertools.combinations(range(P + 1, L), q):
            for counts in itertools.combinations(sorted(candidates,
                                                        reverse=True), q):
                flops = architecture_flops(n, d, L, range(1, P + 1), layers,
                                           counts, extra)
                if flops > eta * dense:
                    continue
                am = accuracy_metric(sigmas, n, P, layers, counts)
                if best is None or am > best[0] + 1e-12:
                    best = (am, layers, counts, flops)
    return best


@pytest.mark.parametrize('eta', [0.35, 0.5, 0.7, 0.95])
@pytest.mark.parametrize('seed', [0, 1])
def test_glad_search_equals_brute_force(eta, seed):
    torch.manual_seed(seed)
    L, n, d, P, Q = 7, 12, 8, 1, 3
    sigmas = [torch.rand(n).pow(3) for _ in range(L)]
    candidates = range(2, n)
    ref = brute_force(sigmas, n, d, P, Q, eta, candidates)
    got = glad_search(sigmas, n, d, P, Q, eta, candidates)
    if ref is None:
        assert got is None
        return
    # the search and the brute force both take AMs within 1e-12 as equal
    # (and the search's Pareto fronts may keep, per layer, an entry 1e-12
    # worse): the best AMs agree within (L + 1) 1e-12; their own rounding
    # (sums of <= L energies <= 1 in float64) is ~1e-15
    assert got['am'] == pytest.approx(ref[0], rel=0, abs=(L + 1) * 1e-12)
    assert got['ratio'] <= eta
    assert len(got['glad_layers']) <= Q
    assert all(P < l < L for l in got['glad_layers'])
    assert got['glad_tokens'] == sorted(got['glad_tokens'], reverse=True)
    # what it reports is what its architecture has
    # the same <= L energies <= 1, summed by the search and by
    # accuracy_metric: 2 gamma_L L in float64
    assert got['am'] == pytest.approx(
        accuracy_metric(sigmas, n, P, got['glad_layers'],
                        got['glad_tokens']),
        rel=0, abs=rounding_tol(torch.float64, L, L))
    assert got['flops'] == architecture_flops(n, d, L, range(1, P + 1),
                                              got['glad_layers'],
                                              got['glad_tokens'], 1)


def test_glad_search_infeasible_and_errors():
    sigmas = [torch.rand(10) for _ in range(4)]
    assert glad_search(sigmas, 10, 8, 1, 2, 0.05) is None
    with pytest.raises(ValueError, match='P='):
        glad_search(sigmas, 10, 8, 4, 2, 0.5)
