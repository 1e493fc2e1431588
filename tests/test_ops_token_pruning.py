"""Token pruning operators (SaiT, AS-ViT): scorers, selectors, masked
attention, dropping and padding."""
import math
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from mmvitaccel import ops
from mmvitaccel.ops import keep_masks, token_pruning
from mmvitaccel.ops import (asvit_score, batch_mean_keep_mask,
                            cls_attention_score, gather_tokens, kept_indices,
                            mass_keep_mask, masked_attention, pad_kept_tokens,
                            restore_tokens, threshold_keep_mask, tis_score,
                            topk_keep_mask, value_keep_count,
                            value_keep_counts)

from .tolerance import (assert_equal, assert_rounding_close, attention_tol,
                        rounding_tol)


def _qkv(B=2, h=3, T=9, d=4, seed=0):
    """float64 inputs: the comparisons with other kernels (SDPA) and other
    summation orders hold to a float64 rounding bound on any CPU."""
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(B, h, T, d, generator=g, dtype=torch.float64)
        for _ in range(3)
    ]


def test_scores_follow_their_equations():
    q, k, v = _qkv()
    ctx, attn = masked_attention(q, k, v, 0.5)
    # SDPA is another kernel: equal within the attention's rounding bound
    torch.testing.assert_close(
        ctx, F.scaled_dot_product_attention(q, k, v, scale=0.5), rtol=0,
        atol=attention_tol(q, k, v, 0.5))
    tis = tis_score(attn)
    assert tis.shape == (2, 8)
    # N = 8 quotients c_n / sum c (the sum: gamma_8 relative) summed again:
    # n = 2 N + 1 roundings of values <= 1
    assert_rounding_close(tis.sum(-1), torch.ones(2, dtype=tis.dtype),
                          2 * 8 + 1, 1.0)
    # TIS_n: column sums over heads and rows, renormalised over patches;
    # ours sums h T = 27 terms per column then 8 columns, the reference the
    # 216 terms at once, both of probabilities (sums <= h T, tis <= 1):
    # relative errors of numerator and denominator, n = 27 + 27 + 216 + 1
    col = attn[0, :, :, 3].sum()
    assert_rounding_close(tis[0, 2], col / attn[0, :, :, 1:].sum(),
                          27 + 27 + 216 + 1, 1.0)
    cls = cls_attention_score(attn)
    # a mean of h = 3 probabilities in another order: 3 sums and a division
    assert_rounding_close(cls[1, 4], attn[1, :, 0, 5].mean(), 3 + 1, 1.0)
    s = asvit_score(attn, ctx)
    norms = ctx[1, :, 5].norm(dim=-1)
    # norms of d = 4 (and a root), their sum over h = 3, the weighted sum
    # over h: relative errors of values <= 1, n = 4 + 2 + 3 + 3 + 2
    assert_rounding_close(
        s[1, 4], (norms / norms.sum() * attn[1, :, 0, 5]).sum(), 14, 1.0)


def test_value_count_is_round_rho_n_plus_one_with_cls():
    assert value_keep_count(196, 1.0) == 196
    assert value_keep_count(196, 0.5) == 98  # round(98.5) = 99 with cls
    assert value_keep_count(4, 0.01) == 1
    counts = value_keep_counts(torch.tensor([196, 10]), 0.5)
    assert counts.tolist() == [98, value_keep_count(10, 0.5)]
    with pytest.raises(ValueError, match='density'):
        value_keep_count(196, 0.)


def _float64_value_counts(alive, density):
    """The float64 expression ``value_keep_counts`` computed before it
    went to int64 (the reference)."""
    alive = alive.to(torch.float64)
    total = torch.floor(density * (alive + 1) + 0.5)
    return torch.minimum(alive, (total - 1).clamp_min(1)).long()


class _Dtypes(TorchDispatchMode):
    """Records the dtype of every tensor an aten operator returns."""

    def __init__(self):
        super().__init__()
        self.seen = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, (tuple, list)) else [out]
        self.seen.update(t.dtype for t in outs if isinstance(t, torch.Tensor))
        return out


@pytest.mark.parametrize('density', [
    1.0, 0.7, 0.5, 0.42, 0.65, 0.1, 5 / 6, 1 / 3, 1e-3, 2**-36, 2**-40,
    math.nextafter(0.7, 0.), math.nextafter(0.5, 1.), 5e-324
])
def test_value_counts_are_float64_counts_without_float64(density):
    """The int64 counts equal the float64 expression's for every count up
    to 4096 and some up to ``2**31 - 1``, and no float64 tensor is made
    (exact integers: compared for equality)."""
    alive = torch.cat((torch.arange(4097),
                       torch.tensor([10**6, 10**9, 2**30, 2**31 - 1])))
    with _Dtypes() as dtypes:
        counts = value_keep_counts(alive, density)
    assert torch.float64 not in dtypes.seen and counts.dtype == torch.long
    assert torch.equal(counts, _float64_value_counts(alive, density))
    # int32 counts (another caller's sum) give the same
    assert torch.equal(value_keep_counts(alive.int(), density), counts)


def test_value_counts_keep_float64_rounding():
    """``0.7`` is stored a little low: ``0.7 * 5`` is below 3.5 exactly but
    rounds to 3.5 in float64, so 4 tokens with the class token, 3 patches
    (the scalar form's answer; exact rationals would give 2)."""
    assert Fraction(0.7) * 5 < Fraction(7, 2) and 0.7 * 5 == 3.5
    assert value_keep_count(4, 0.7) == 3
    assert value_keep_counts(torch.tensor([4]), 0.7).tolist() == [3]


def test_value_counts_on_meta():
    counts = value_keep_counts(torch.zeros(3, dtype=torch.long,
                                           device='meta'), 0.5)
    assert counts.shape == (3, ) and counts.device.type == 'meta'
    with pytest.raises(ValueError, match='density'):
        value_keep_counts(torch.tensor([3]), 1.5)


def test_selectors_moved_to_keep_masks():
    """The selectors live in ``ops.keep_masks``; the old homes still give
    the same functions."""
    for name in keep_masks.__all__:
        assert getattr(token_pruning, name) is getattr(keep_masks, name)
        assert getattr(ops, name) is getattr(keep_masks, name)


def test_topk_keeps_the_highest_scores():
    scores = torch.tensor([[0.1, 0.5, 0.2, 0.9], [4., 3., 2., 1.]])
    keep = topk_keep_mask(scores, 2)
    assert keep.tolist() == [[False, True, False, True],
                             [True, True, False, False]]
    valid = torch.tensor([[True, False, True, True]] * 2)
    keep = topk_keep_mask(scores, torch.tensor([2, 1]), valid)
    assert keep.tolist() == [[False, False, True, True],
                             [True, False, False, False]]


def test_mass_count_adapts_to_score_concentration():
    N = 20
    peaked = torch.full((N, ), 0.1 / (N - 2))
    peaked[3], peaked[7] = 0.5, 0.4  # 90% of the mass on two tokens
    flat = torch.full((N, ), 1. / N)
    keep, count = mass_keep_mask(torch.stack([peaked, flat]), 0.7)
    assert count.tolist() == [2, 14]  # 0.7 of a flat mass needs 14 of 20
    assert keep[0].nonzero().flatten().tolist() == [3, 7]
    assert keep.sum(-1).tolist() == count.tolist()
    # a higher threshold keeps more, 1.0 keeps all
    assert (mass_keep_mask(torch.stack([peaked, flat]), 0.95)[1] >
            count).all()
    assert mass_keep_mask(flat[None], 1.0)[0].all()


def test_threshold_is_hard_forward_and_soft_backward():
    scores = torch.tensor([[0.0010, 0.0012, 0.0030, 0.0009]])
    theta = torch.tensor(0.0011, requires_grad=True)
    mask = threshold_keep_mask(scores, theta, tau=1e-4)
    assert mask.tolist() == [[0., 1., 1., 0.]]
    mask.sum().backward()
    # d/dtheta sigmoid((S - theta)/tau) = -sigmoid'(.)/tau < 0
    assert theta.grad is not None and theta.grad < 0
    soft = torch.sigmoid((scores - 0.0011) / 1e-4)
    expected = -(soft * (1 - soft) / 1e-4).sum()
    # autograd runs the same float32 operations in the same order (sigmoid
    # backward (1 - s) s, the division by tau, the sum to theta): bit-exact
    assert_equal(theta.grad, expected)
    # nothing above the threshold: the best token survives
    assert threshold_keep_mask(scores, 1.0).tolist() == [[0., 0., 1., 0.]]


def test_batch_mean_count():
    scores = torch.rand(3, 10)
    keep = torch.zeros(3, 10, dtype=torch.bool)
    keep[0, :2], keep[1, :5], keep[2, :8] = True, True, True
    mean = batch_mean_keep_mask(scores, keep)
    assert mean.sum(-1).tolist() == [5, 5, 5]
    assert torch.equal(mean, topk_keep_mask(scores, 5))


@pytest.mark.parametrize('mode', ['logits', 'policy'])
def test_masked_attention_equals_attention_on_the_kept_tokens(mode):
    q, k, v = _qkv(B=1, T=9)
    policy = torch.tensor([[1., 1., 0., 1., 0., 0., 1., 1., 0.]])
    ctx, attn = masked_attention(q, k, v, 0.5, policy, mode)
    keep = policy[0].bool()
    ref = F.scaled_dot_product_attention(
        q[:, :, keep], k[:, :, keep], v[:, :, keep], scale=0.5)
    T, eps = policy.shape[1], 1e-6  # eps: masked_attention's default
    # rounding (SDPA is another kernel), and in policy mode the stabiliser:
    # (N + eps mean(v)) / (S + eps) - N / S with S >= 1 (the row's largest
    # visible weight is exp(0)) is at most 2 eps max|v|
    tol = attention_tol(q, k, v, 0.5)
    if mode == 'policy':
        tol += 2 * eps * float(v.abs().max())
    torch.testing.assert_close(ctx[:, :, keep], ref, rtol=0, atol=tol)
    masked = attn[:, :, keep][..., ~keep]
    if mode == 'logits':  # exp(MASKED_LOGIT + l - max) is exactly 0
        assert (masked == 0).all()
    else:  # eps / T / (S + eps) with S >= 1
        assert masked.max() <= eps / T
    if mode == 'policy':  # a pruned query sees the kept keys and itself
        # (its own weight is not small: not a rounding comparison)
        assert (attn[0, :, 2, 2] > 1e-3).all()
        assert attn[0, :, 2, [4, 5, 8]].max() <= eps / T
        p = policy.clone().requires_grad_()
        masked_attention(q, k, v, 0.5, p, mode)[0].sum().backward()
        assert p.grad.abs().sum() > 0


def test_pad_and_restore():
    x = torch.arange(2 * 6 * 2, dtype=torch.float).reshape(2, 6, 2)
    keep = torch.tensor([[True, False, True, False, False],
                         [False, True, True, True, False]])
    out, index, key_mask = pad_kept_tokens(x, keep)
    assert out.shape == (2, 4, 2)
    assert index.tolist()[1] == [1, 2, 3]
    assert key_mask.tolist() == [[True, True, True, False], [True] * 4]
    # gathers, scatters and the same additions: bit-exact
    assert_equal(out[0, :3], x[0, [0, 1, 3]])
    assert_equal(out[1, 1:], x[1, 2:5])
    index2, valid = kept_indices(keep)
    assert torch.equal(index2, index) and torch.equal(valid, key_mask[:, 1:])
    full = torch.zeros(2, 5, 2)
    restored = restore_tokens(full, out[:, 1:] + 100, index, valid)
    assert_equal(restored[0, [0, 2]], x[0, [1, 3]] + 100)
    assert restored[0, [1, 3, 4]].abs().sum() == 0
    assert_equal(gather_tokens(restored, index)[1], x[1, 2:5] + 100)
