"""DGSSA and GLAD token operators (mmvitaccel.ops.dgssa, mmvitaccel.ops.glad)."""
import itertools

import pytest
import torch

from mmvitaccel.ops import (GLAD, INIT_MODES, AttentionStats,
                            accuracy_metric, architecture_flops,
                            attention_to_logits, glad_flops, glad_search,
                            init_static_logits, layer_flops, local_logits,
                            retained_energy, static_attention, token_counts)


def random_attention(*shape):
    return torch.randn(*shape).mul(2).softmax(-1)


def test_static_attention_from_logits_of_attention():
    attn = random_attention(3, 10, 10)
    v = torch.randn(4, 3, 10, 8)
    out = static_attention(attention_to_logits(attn), v)
    torch.testing.assert_close(out, attn @ v, atol=1e-4, rtol=1e-4)


def test_static_attention_masks():
    logits = torch.randn(2, 6, 6)
    v = torch.randn(3 * 4, 2, 6, 5)  # 3 images x 4 windows
    allowed = torch.rand(4, 6, 6) > 0.4
    allowed[:, torch.arange(6), torch.arange(6)] = True
    out = static_attention(logits, v, allowed)
    # bool and additive masks agree, masked keys get no weight
    additive = torch.zeros(4, 6, 6).masked_fill(~allowed, -1e4)
    torch.testing.assert_close(out, static_attention(logits, v, additive))
    noisy = v.clone().view(3, 4, 2, 6, 5)
    for w in range(4):
        for i in range(6):
            ref = (logits[:, i].masked_fill(~allowed[w, i], float('-inf'))
                   .softmax(-1)[None, :, None] @ noisy[:, w]).squeeze(-2)
            torch.testing.assert_close(out.view(3, 4, 2, 6, 5)[:, w, :, i],
                                       ref)
    with pytest.raises(ValueError, match='not a multiple'):
        static_attention(logits, v[:5], allowed)


@pytest.mark.parametrize('mode', INIT_MODES)
def test_init_modes(mode):
    mean = random_attention(4, 17, 17)
    logits = init_static_logits(mode, 4, 17, grid=(4, 4), extra_tokens=1,
                                mean_attention=mean)
    assert logits.shape == (4, 17, 17)
    if mode == 'dg':
        torch.testing.assert_close(logits.softmax(-1), mean, atol=1e-5,
                                   rtol=1e-4)
    elif mode == 'uniform':
        assert (logits == 0).all()
    elif mode == 'random':
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
    torch.testing.assert_close(stats.mean, same)
    assert stats.difference.abs().max() < 1e-4
    samples = random_attention(5, 2, 6, 6)
    stats = AttentionStats(singular_values=True)
    stats.update(samples[:2])
    stats.update(samples[2:])
    mean = samples.mean(0)
    ref = ((samples - mean).pow(2).sum((-1, -2)).mean(0).sqrt() /
           mean.pow(2).sum((-1, -2)).sqrt())
    torch.testing.assert_close(stats.mean, mean)
    torch.testing.assert_close(stats.difference, ref)
    torch.testing.assert_close(stats.expected_singular_values,
                               torch.linalg.svdvals(samples).mean((0, 1)))
    with pytest.raises(ValueError, match='no attention'):
        AttentionStats().mean


def test_glad_shapes_and_position_reembedding():
    glad = GLAD(196, 126, 32)
    x = torch.randn(2, 196, 32)
    y = glad(x)
    assert y.shape == (2, 126, 32)
    # Y = GELU(LN(W X)) + E
    ref = torch.nn.functional.gelu(glad.norm(glad.weight @ x)) + \
        glad.pos_embed
    torch.testing.assert_close(y, ref)
    # E re-embeds positions: the same token content at different output
    # positions differs by E
    const = torch.ones(1, 196, 32)
    out = glad(const)[0]
    torch.testing.assert_close(out - out[0], glad.pos_embed[0] -
                               glad.pos_embed[0, 0], atol=1e-5, rtol=0)
    assert glad.pos_embed.std() > 0
    # 'pool' init: rows are averages of consecutive tokens
    torch.testing.assert_close(glad.weight.sum(1), torch.ones(126))
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
    assert e == pytest.approx([0, 16 / 25, 1, 1])


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
    assert got['am'] == pytest.approx(ref[0], abs=1e-9)
    assert got['ratio'] <= eta
    assert len(got['glad_layers']) <= Q
    assert all(P < l < L for l in got['glad_layers'])
    assert got['glad_tokens'] == sorted(got['glad_tokens'], reverse=True)
    # what it reports is what its architecture has
    assert got['am'] == pytest.approx(
        accuracy_metric(sigmas, n, P, got['glad_layers'],
                        got['glad_tokens']))
    assert got['flops'] == architecture_flops(n, d, L, range(1, P + 1),
                                              got['glad_layers'],
                                              got['glad_tokens'], 1)


def test_glad_search_infeasible_and_errors():
    sigmas = [torch.rand(10) for _ in range(4)]
    assert glad_search(sigmas, 10, 8, 1, 2, 0.05) is None
    with pytest.raises(ValueError, match='P='):
        glad_search(sigmas, 10, 8, 4, 2, 0.5)
