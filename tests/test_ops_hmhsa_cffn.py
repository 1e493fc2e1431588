"""hMHSA and cFFN operators (mmvitaccel.ops.hmhsa, mmvitaccel.ops.cffn)."""
import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mmvitaccel  # noqa: F401
from mmvitaccel.ops import (AttentionHallucination, CompactLinear,
                            IntraHeadHallucination, RepLinear, cffn_flops,
                            cffn_params, check_even_heads, compact_dims,
                            ffn_flops, hallucinated_attention, hmhsa_flops,
                            hmhsa_params, mhsa_flops, split_qkv_weights,
                            switch_to_deploy)
from mmvitaccel.analysis.flops import count_flops, count_params

from .tolerance import assert_equal, rounding_tol


class HalluAttention(nn.Module):
    """A bare hMHSA layer on a token grid (optionally with a class token)."""

    def __init__(self, c, h, grid, num_extra=0):
        super().__init__()
        self.h, self.grid, self.num_extra = h, grid, num_extra
        self.q = nn.Linear(c, c // 2)
        self.k = nn.Linear(c, c // 2)
        self.v = nn.Linear(c, c)
        self.proj = nn.Linear(c, c)
        self.hallucination = AttentionHallucination(h)

    def forward(self, x):
        B, N, C = x.shape
        d = C // self.h
        q = self.q(x).reshape(B, N, self.h // 2, d).transpose(1, 2)
        k = self.k(x).reshape(B, N, self.h // 2, d).transpose(1, 2)
        v = self.v(x).reshape(B, N, self.h, d).transpose(1, 2)
        out = hallucinated_attention(q, k, v, self.hallucination, self.grid,
                                     self.num_extra)
        return self.proj(out.transpose(1, 2).reshape(B, N, C))


def _train_bn(module, shape, steps=3):
    """Move the BN running statistics away from their initial values."""
    module.train()
    dtype = next(module.parameters()).dtype
    with torch.no_grad():
        for _ in range(steps):
            module(torch.randn(*shape, dtype=dtype) * 3 + 1)
        for m in module.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    module.eval()


def _rep_terms(layer, positions=0):
    """Accumulation length of a RepLinear: its ``in_features`` products,
    with batch statistics the mean and the variance over ``positions``, the
    sum of the branches and a few roundings (BatchNorm's and the fold's)."""
    return layer.in_features + 2 * positions + layer.num_branches + 8


def _rep_scale(layer, x, a, batch=False):
    """Summed magnitudes through a training-form RepLinear, for Higham's
    bound ``2 gamma_n S`` (tests/tolerance.py).

    Branch ``i`` is ``(y_i - mu_i) gamma_i / sigma_i + beta_i`` with ``y_i
    = x W_i^T``: the errors of ``y_i`` (sums of ``|x| |W_i|``; ``a >= |x|``
    also bounds the errors ``x`` carries in), of the mean and of the
    variance (relative, times ``|y_i - mu_i|``), and the fold's roundings
    all reach the output scaled by ``|gamma_i| / sigma_i``.

    Args:
        x (Tensor): the input ``(..., in)``, for the batch statistics.
        a (Tensor): a bound of ``|x|``, same shape.
        batch (bool): batch statistics (training) or the running ones.

    Returns:
        tuple: ``S`` per position ``(M, out)`` (``sum_i (a |W_i|^T +
        |mu_i|) |gamma_i| / sigma_i + |beta_i|``), the output ``(M, out)``
        (computed without touching the running statistics), and the scale
        of the running statistics' updates, ``max (a |W_i|^T + |mu_i|)^2``
        (at least that of the means).
    """
    flat = x.reshape(-1, layer.in_features)
    a = a.reshape(-1, layer.in_features)
    scale, out, stats = 0, 0, 0.
    for w, norm in zip(layer.weights, layer.norms):
        y, s_y = flat @ w.t(), a @ w.abs().t()
        if batch:
            mu, var = y.mean(0), y.var(0, unbiased=False)
        else:
            mu, var = norm.running_mean, norm.running_var
        sigma = (var + norm.eps).sqrt()
        scale = scale + (s_y + mu.abs()) * norm.weight.abs() / sigma + \
            norm.bias.abs()
        out = out + (y - mu) * norm.weight / sigma + norm.bias
        stats = max(stats, float((s_y + mu.abs()).max())**2,
                    float(s_y.max()))
    return scale, out, stats


@pytest.mark.parametrize('branches', [1, 2, 3])
def test_rep_linear_deploy_equals_training_form(branches):
    torch.manual_seed(0)
    layer = RepLinear(24, 10, branches).double()
    _train_bn(layer, (5, 7, 24))
    x = torch.randn(2, 9, 24, dtype=torch.double)
    with torch.no_grad():
        ref = layer(x)
        # float64, eval mode: the same function up to rounding
        tol = rounding_tol(x.dtype, _rep_terms(layer),
                           float(_rep_scale(layer, x, x.abs())[0].max()))
        layer.switch_to_deploy()
        out = layer(x)
    assert layer.deploy and not hasattr(layer, 'norms')
    assert isinstance(layer.fused, nn.Linear)
    torch.testing.assert_close(out, ref, rtol=0, atol=tol)


@pytest.mark.parametrize('channel_dim,shape', [(-1, (2, 13, 64)),
                                                (1, (2, 64, 5, 6))])
def test_compact_linear_deploy_equals_training_form(channel_dim, shape):
    torch.manual_seed(1)
    layer = CompactLinear(64, 16, ratio=0.5, branches=2,
                          channel_dim=channel_dim).double()
    _train_bn(layer, shape)
    x = torch.randn(*shape, dtype=torch.float64)
    with torch.no_grad():
        ref = layer(x)
        # float64, two chained folds: the same function up to rounding; the
        # first factor's bound is the second's input magnitude
        xt = x.movedim(1, -1) if channel_dim == 1 else x
        s_u, mid, _ = _rep_scale(layer.u, xt, xt.abs())
        s_v = _rep_scale(layer.v, mid, s_u)[0]
        tol = rounding_tol(x.dtype,
                           _rep_terms(layer.u) + _rep_terms(layer.v),
                           float(s_v.max()))
        switch_to_deploy(layer)
        out = layer(x)
    torch.testing.assert_close(out, ref, rtol=0, atol=tol)
    # k = t m C / (m + 1) with mC = 64, C = 16 (m = 4): 0.5 * 64 * 16 / 80
    assert layer.rank == round(0.5 * 4 * 16 / 5)
    assert layer.u.fused.weight.shape == (layer.rank, 64)
    assert layer.v.fused.weight.shape == (16, layer.rank)


@pytest.mark.parametrize('deploy', [False, True])
def test_compact_linear_on_maps_equals_token_form(deploy):
    """The maps path (1x1 convs on (B, mC, H W)) computes what the token
    path computes on the same weights, BN statistics included."""
    torch.manual_seed(2)
    tokens = CompactLinear(48, 12, branches=2).double()
    maps = CompactLinear(48, 12, branches=2, channel_dim=1).double()
    maps.load_state_dict(tokens.state_dict())
    x = torch.randn(3, 48, 5, 7, dtype=torch.float64) * 2 + 1
    # float64; other kernels (batched products, BatchNorm on (B, C, L)):
    # equal up to rounding, with the batch statistics over M = 105
    # positions in the accumulation length
    M, xt = 3 * 5 * 7, x.movedim(1, -1)
    with torch.no_grad():
        s_u, mid, stats_u = _rep_scale(tokens.u, xt, xt.abs(), batch=True)
        s_v, _, stats_v = _rep_scale(tokens.v, mid, s_u, batch=True)
    terms = _rep_terms(tokens.u, M) + _rep_terms(tokens.v, M)
    ref = tokens(xt).movedim(-1, 1)
    out = maps(x)  # training mode: batch statistics over B, H and W
    torch.testing.assert_close(out, ref, rtol=0,
                               atol=rounding_tol(x.dtype, terms,
                                                 float(s_v.max())))
    # the parameters are untouched, the running statistics each took one
    # update from its own forward: the means' and variances' rounding
    state, ref_state = maps.state_dict(), tokens.state_dict()
    assert state.keys() == ref_state.keys()
    for key, value in state.items():
        if 'running' in key:
            torch.testing.assert_close(
                value, ref_state[key], rtol=0,
                atol=rounding_tol(x.dtype, terms, max(stats_u, stats_v)))
        else:
            assert_equal(value, ref_state[key], msg=key)
    if deploy:
        # both fold the same statistics (they agree to rounding, above):
        # the folded products then differ by rounding only
        maps.load_state_dict(ref_state)
        switch_to_deploy(tokens.eval())
        switch_to_deploy(maps.eval())
        with torch.no_grad():
            a = xt.abs()
            w_u, b_u = tokens.u.fused.weight, tokens.u.fused.bias
            w_v, b_v = tokens.v.fused.weight, tokens.v.fused.bias
            scale = (a @ w_u.abs().t() + b_u.abs()) @ w_v.abs().t() + \
                b_v.abs()
            torch.testing.assert_close(
                maps(x), tokens(xt).movedim(-1, 1), rtol=0,
                atol=rounding_tol(x.dtype, 48 + tokens.rank + 4,
                                  float(scale.max())))


def test_compact_linear_trains_its_branches():
    layer = CompactLinear(32, 8, branches=2)
    layer(torch.randn(4, 6, 32)).square().sum().backward()
    grads = [p.grad for p in layer.parameters()]
    assert all(g is not None and g.abs().sum() > 0 for g in grads)


def test_compact_dims_rejects_bad_ratio():
    assert compact_dims(1536, 384, 1.0) == round(1536 * 384 / 1920)
    for bad in (0, -0.5, 1.5):
        with pytest.raises(ValueError, match='compact ratio'):
            compact_dims(1536, 384, bad)
    with pytest.raises(ValueError, match='branches'):
        RepLinear(4, 4, branches=0)


@pytest.mark.parametrize('heads', [1, 3, 5, 0])
def test_odd_head_counts_are_refused(heads):
    with pytest.raises(ValueError, match='even number of heads'):
        check_even_heads(heads)
    with pytest.raises(ValueError, match='even number of heads'):
        AttentionHallucination(heads)


@pytest.mark.parametrize('num_extra', [0, 1])
def test_ihh_touches_only_spatial_neighbours(num_extra):
    torch.manual_seed(0)
    H, W, G, Nq = 5, 6, 2, 3
    ihh = IntraHeadHallucination(G).double()
    attn = torch.randn(1, G, Nq, num_extra + H * W, dtype=torch.double)
    jac = torch.autograd.functional.jacobian(
        lambda a: ihh(a, (H, W), num_extra), attn)
    # jac[0, g, n, j, 0, g', n', j']: output (g, n, j) wrt input (g', n', j')
    jac = jac[0, :, :, :, 0]
    for g in range(G):
        for n in range(Nq):
            for j in range(num_extra + H * W):
                touched = jac[g, n, j].abs() > 0
                # nothing from other maps or other query rows
                assert not touched[torch.arange(G) != g].any()
                assert not touched[g, torch.arange(Nq) != n].any()
                row = touched[g, n]
                if j < num_extra:  # class token: only itself
                    assert row.nonzero().flatten().tolist() == [j]
                    continue
                y, x = divmod(j - num_extra, W)
                for jj in row.nonzero().flatten().tolist():
                    assert jj >= num_extra, 'grid key touched the cls column'
                    yy, xx = divmod(jj - num_extra, W)
                    assert abs(yy - y) <= 1 and abs(xx - x) <= 1
                # and every in-grid neighbour does contribute
                expected = sum(1 for dy in (-1, 0, 1) for dx in (-1, 0, 1)
                               if 0 <= y + dy < H and 0 <= x + dx < W)
                assert int(row.sum()) == expected


def test_ihh_is_a_depthwise_conv_on_the_key_grid():
    torch.manual_seed(0)
    H, W, G, Nq = 4, 3, 3, 5
    ihh = IntraHeadHallucination(G)
    attn = torch.randn(2, G, Nq, H * W)
    out = ihh(attn, (H, W))
    for n in range(Nq):
        ref = F.conv2d(attn[:, :, n].reshape(2, G, H, W), ihh.conv.weight,
                       padding=1, groups=G)
        # another convolution kernel: sums of 9 taps, S = |w| * |attn|
        scale = F.conv2d(attn[:, :, n].reshape(2, G, H, W).abs(),
                         ihh.conv.weight.abs(), padding=1, groups=G)
        torch.testing.assert_close(
            out[:, :, n], ref.flatten(2), rtol=0,
            atol=rounding_tol(attn.dtype, 9 + 1, float(scale.max())))
    with pytest.raises(ValueError, match='IHH expects'):
        ihh(attn, (H, W + 1))


def test_hallucinated_attention_formula():
    torch.manual_seed(0)
    B, h, N, d, grid = 2, 4, 1 + 9, 8, (3, 3)
    hallu = AttentionHallucination(h).double()  # float64: see the bound
    q, k = torch.randn(2, B, h // 2, N, d, dtype=torch.float64)
    v = torch.randn(B, h, N, d, dtype=torch.float64)
    mask = torch.zeros(N, N, dtype=torch.float64)
    mask[:, -1] = -100.0
    out = hallucinated_attention(q, k, v, hallu, grid, 1, mask=mask)
    real = q @ k.transpose(-2, -1) / d**0.5
    source = real.clone()
    source[..., -1] = 0  # masked scores do not feed IHH
    maps = torch.cat((real, hallu.chh(hallu.ihh(source, grid, 1))), dim=1)
    ref = (maps + mask).softmax(-1) @ v
    # rounding bound of the attention: a map entry sums d products, 9 IHH
    # taps and h / 2 CHH terms (S_l: the same with |q|, |k|, |weights|);
    # its error becomes a relative error of the probabilities, doubled by
    # the shift by the row's maximum; the row sums and the products with v
    # add N terms each: n = 2 (d + 9 + h / 2 + 4) + 2 N + 6, relative to
    # max|v| (1 + S_l)
    with torch.no_grad():
        absolute = copy.deepcopy(hallu)
        for p in absolute.parameters():
            p.abs_()
        s_real = q.abs() @ k.abs().transpose(-2, -1) / d**0.5
        s_l = float(torch.cat(
            (s_real, absolute.chh(absolute.ihh(s_real, grid, 1))),
            dim=1).max())
    n = 2 * (d + 9 + h // 2 + 4) + 2 * N + 6
    tol = rounding_tol(v.dtype, n, float(v.abs().max()) * (1 + s_l))
    torch.testing.assert_close(out, ref, rtol=0, atol=tol)

    def masked_weight_bound(maps):
        """A masked key's weight is at most exp(l_j - 100 - max of the
        row's other logits), and the row's sum is at least 1 after the
        shift: rounding adds a few float64 ulps."""
        spread = float((maps[..., -1] - maps[..., :-1].amax(-1)).max())
        return math.exp(spread - 100) * (1 + rounding_tol(maps.dtype, N))

    # the masked key gets (almost) no weight in any of the h maps
    attn = (maps + mask).softmax(-1)
    bound = masked_weight_bound(maps)
    assert attn[..., -1].max() <= bound < 1e-30
    # and its key/value do not matter, even through IHH neighbours: they
    # enter only through the masked column, weight <= the bound, besides
    # rounding
    k2, v2 = k.clone(), v.clone()
    k2[..., -1, :] += 3.0
    v2[..., -1, :] += 3.0
    out2 = hallucinated_attention(q, k2, v2, hallu, grid, 1, mask=mask)
    real2 = q @ k2.transpose(-2, -1) / d**0.5
    maps2 = torch.cat((real2, maps[:, h // 2:]), dim=1)
    leak = 2 * max(bound, masked_weight_bound(maps2)) * float(
        v2.abs().max())
    with torch.no_grad():
        s_l2 = max(s_l, float((q.abs() @ k2.abs().transpose(-2, -1) /
                               d**0.5).max()))
    torch.testing.assert_close(
        out2, out, rtol=0,
        atol=leak + rounding_tol(v.dtype, n,
                                 float(v2.abs().max()) * (1 + s_l2)))


def test_split_qkv_weights_keeps_first_half_of_the_heads():
    C = 8
    w, b = torch.randn(3 * C, 5), torch.randn(3 * C)
    parts = split_qkv_weights(w, b)
    assert_equal(parts['q.weight'], w[:4])  # slices: bit-exact
    assert_equal(parts['k.weight'], w[8:12])
    assert_equal(parts['v.weight'], w[16:])
    assert_equal(parts['v.bias'], b[16:])


@pytest.mark.parametrize('c,h,grid,num_extra', [(64, 4, (7, 7), 0),
                                                (96, 6, (4, 5), 1),
                                                (384, 6, (14, 14), 1)])
def test_hmhsa_flops_and_params_match_closed_formulas(c, h, grid, num_extra):
    n = num_extra + grid[0] * grid[1]
    layer = HalluAttention(c, h, grid, num_extra)
    counted = count_flops(layer, torch.randn(1, n, c))
    assert counted.unsupported_ops == {}
    assert counted.total == hmhsa_flops(n, c, h, num_extra=num_extra)
    assert count_params(layer) == hmhsa_params(c, h)
    # Eq. 5 - Eq. 7 = N C^2 + (2C - h^2 - 18h) N^2 / 4 on a pure grid (the
    # paper counts the explicit form)
    if num_extra == 0:
        saved = mhsa_flops(n, c) - hmhsa_flops(n, c, h, form='explicit')
        assert 4 * saved == 4 * n * c * c + (2 * c - h * h - 18 * h) * n * n


@pytest.mark.parametrize('c,m,t', [(64, 4, 0.5), (384, 4, 0.5),
                                   (128, 8, 0.25)])
def test_cffn_flops_and_params_match_closed_formulas(c, m, t):
    n = 50
    ffn = nn.Sequential(nn.Linear(c, m * c), nn.GELU(),
                        CompactLinear(m * c, c, ratio=t, deploy=True))
    counted = count_flops(ffn, torch.randn(1, n, c))
    assert counted.total == cffn_flops(n, c, m * c, t)
    assert count_params(ffn) == cffn_params(c, m * c, t)
    k = compact_dims(m * c, c, t)
    assert cffn_flops(n, c, m * c, t) == m * n * c * c + (m + 1) * n * c * k
    # the ratio to the vanilla FFN is (1 + t) / 2 up to the rounding of k
    ratio = cffn_flops(n, c, m * c, t) / ffn_flops(n, c, m * c)
    assert abs(ratio - (1 + t) / 2) < 1 / c
