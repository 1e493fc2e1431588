"""Property tests (hypothesis) of the token operators in ``mmvitaccel.ops``:
kept counts follow each keep rule per sample, padded or masked tokens do
not change the outputs on real tokens, ``restore(select(x))`` gives ``x``
back on the kept positions, and a batch of ``N`` equals ``N`` batches of
one. Shapes are tiny; every tensor comes from a seeded generator drawn by
hypothesis, so a failure is reproduced from the seed it prints."""
import math
from fractions import Fraction

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mmvitaccel.ops import (GLAD, asvit_score, batch_mean_keep_mask,
                            gather_tokens, kept_indices, mass_keep_mask,
                            masked_attention, neighbourhood_mask,
                            neighbourhood_windows, pad_kept_tokens,
                            pad_to_multiple, pool_centres, restore_tokens,
                            threshold_keep_mask, tis_score, topk_keep_mask,
                            value_keep_count, value_keep_counts,
                            window_partition, window_reverse)

from .tolerance import (assert_equal, assert_rounding_close, attention_tol,
                        rounding_tol)

#: modest and deterministic: no example database written into the tree
PROPS = settings(max_examples=30, deadline=None, database=None,
                 derandomize=True)

seeds = st.integers(0, 2**31 - 1)
batches = st.integers(1, 4)
patches = st.integers(1, 12)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _keep_mask(g, B, N, at_least_one=True):
    """Random ``(B, N)`` bool keep mask (each row keeps one token or more)."""
    keep = torch.rand(B, N, generator=g) < torch.rand(B, 1, generator=g)
    if at_least_one:
        keep[torch.arange(B), torch.randint(N, (B, ), generator=g)] = True
    return keep


def _attention_inputs(g, B, h, T, d):
    """float64: comparisons across shapes and kernels hold to a float64
    rounding bound (:func:`_attention_tol`) on any CPU."""
    return [
        torch.randn(B, h, T, d, generator=g, dtype=torch.float64)
        for _ in range(3)
    ]


# --- kept counts -------------------------------------------------------------


@PROPS
@given(n=st.integers(1, 400), density=st.floats(1e-3, 1.0))
def test_value_count_follows_round_rho_n_plus_one(n, density):
    """SaiT value: ``K = round(rho (N + 1))`` with the class token, so
    ``K - 1`` patches, clamped to ``[1, N]``; the tensor form agrees."""
    count = value_keep_count(n, density)
    total = math.floor(density * (n + 1) + 0.5)
    assert count == min(n, max(1, total - 1))
    assert 1 <= count <= n
    assert value_keep_counts(torch.tensor([n]), density).tolist() == [count]
    # a larger density never keeps fewer tokens
    assert value_keep_count(n, min(1.0, density * 1.5)) >= count


@st.composite
def value_count_cases(draw):
    """``(alive, density)``: counts up to ``2**31 - 1`` (most of them small)
    and a density anywhere in ``(0, 1]`` (subnormals included), or within a
    few float64 steps of putting ``rho * (n + 1)`` on a half (``k + 1/2``),
    where float64 rounding decides the count."""
    alive = draw(st.lists(st.one_of(st.integers(0, 600),
                                    st.integers(0, 2**31 - 1)),
                          min_size=1, max_size=6))
    if draw(st.booleans()):
        return alive, draw(st.floats(0., 1., exclude_min=True))
    t = alive[0] + 1
    density = (draw(st.integers(0, t - 1)) + 0.5) / t
    steps = draw(st.integers(-4, 4))
    for _ in range(abs(steps)):
        density = math.nextafter(density, math.copysign(2., steps))
    return alive, min(1., max(density, 5e-324))


def _float64_count(n, density):
    """The count from float64 roundings, computed from the exact product
    (``fractions``) rounded once to float64 (``float`` of a ``Fraction``
    rounds to nearest, ties to even, as float64 multiplication does), then
    ``+ 0.5`` in float64: independent of torch and of the CPU's
    multiplier."""
    product = float(Fraction(density) * (n + 1))
    return min(n, max(1, math.floor(product + 0.5) - 1))


@settings(max_examples=400, deadline=None, database=None, derandomize=True)
@given(case=value_count_cases())
def test_value_counts_equal_the_float64_counts(case):
    """The int64 ``value_keep_counts`` gives the counts of the float64
    expression it replaced, for every density and count (exact integers,
    compared for equality): against the ``fractions`` reference, the
    scalar :func:`value_keep_count` (Python floats) and the float64 tensor
    expression."""
    alive, density = case
    counts = value_keep_counts(torch.tensor(alive), density)
    expected = [_float64_count(n, density) for n in alive]
    assert counts.tolist() == expected
    assert [value_keep_count(n, density) for n in alive] == expected
    n = torch.tensor(alive, dtype=torch.float64)
    total = torch.floor(density * (n + 1) + 0.5)
    assert torch.equal(counts,
                       torch.minimum(n, (total - 1).clamp_min(1)).long())


@PROPS
@given(seed=seeds, B=batches, N=patches)
def test_topk_keeps_count_highest_valid_scores_per_row(seed, B, N):
    g = _gen(seed)
    scores = torch.rand(B, N, generator=g)
    count = torch.randint(0, N + 1, (B, ), generator=g)
    valid = _keep_mask(g, B, N)
    keep = topk_keep_mask(scores, count, valid)
    assert keep.sum(-1).tolist() == torch.minimum(
        count, valid.sum(-1)).tolist()
    assert not (keep & ~valid).any()
    for b in range(B):  # every kept score beats every valid dropped one
        kept, dropped = scores[b][keep[b]], scores[b][valid[b] & ~keep[b]]
        if len(kept) and len(dropped):
            assert kept.min() > dropped.max()


@PROPS
@given(seed=seeds, B=batches, N=patches, m_th=st.floats(0.05, 1.0))
def test_mass_keeps_the_fewest_tokens_reaching_the_threshold(
        seed, B, N, m_th):
    g = _gen(seed)
    scores = torch.rand(B, N, generator=g) ** 3  # uneven masses
    valid = _keep_mask(g, B, N)
    keep, count = mass_keep_mask(scores, m_th, valid)
    assert keep.sum(-1).tolist() == count.tolist()
    assert not (keep & ~valid).any()
    for b in range(B):
        mass = scores[b] * valid[b]
        mass = mass / mass.sum()
        ranked = mass.sort(descending=True).values.cumsum(0)
        k = int(count[b])
        if m_th >= 1.:
            assert k == int(valid[b].sum())
            continue
        # K = min{k : sum of the k largest masses >= M_th} (1e-6: the
        # selector's own margin); our sums and the selector's are the same
        # <= N masses (summing to <= 1, each a quotient by a sum of N)
        # added in other orders, so they may differ by tol on either side
        # of the threshold
        tol = rounding_tol(scores.dtype, 2 * N + 1, 1.0)
        assert ranked[k - 1] >= m_th - 1e-6 - tol
        assert k == 1 or ranked[k - 2] < m_th - 1e-6 + tol
        assert_rounding_close(mass[keep[b]].sum(), ranked[k - 1], N, 1.0)


@PROPS
@given(seed=seeds, B=batches, N=patches, theta=st.floats(0.0, 1.0))
def test_threshold_keeps_scores_above_theta_and_the_best(seed, B, N, theta):
    g = _gen(seed)
    scores = torch.rand(B, N, generator=g)
    valid = _keep_mask(g, B, N)
    mask = threshold_keep_mask(scores, theta, valid=valid)
    assert set(mask.unique().tolist()) <= {0., 1.}
    for b in range(B):
        expected = (scores[b] > theta) & valid[b]
        best = scores[b].masked_fill(~valid[b], -1).argmax()
        expected[best] = True
        assert mask[b].bool().tolist() == expected.tolist()


@PROPS
@given(seed=seeds, B=batches, N=patches)
def test_batch_mean_keeps_the_rounded_mean_count_in_every_row(seed, B, N):
    g = _gen(seed)
    scores = torch.rand(B, N, generator=g)
    keep = _keep_mask(g, B, N, at_least_one=False)
    out = batch_mean_keep_mask(scores, keep)
    k = max(1, math.floor(keep.sum(-1).float().mean().item() + 0.5))
    assert out.sum(-1).tolist() == [k] * B
    assert torch.equal(out, topk_keep_mask(scores, k))  # bool masks


# --- select / restore --------------------------------------------------------


@PROPS
@given(seed=seeds, B=batches, N=patches)
def test_kept_indices_list_the_kept_positions_ascending(seed, B, N):
    g = _gen(seed)
    keep = _keep_mask(g, B, N, at_least_one=False)
    index, valid = kept_indices(keep)
    assert index.shape == valid.shape
    assert index.shape[1] == max(1, int(keep.sum(-1).max()))
    assert valid.sum(-1).tolist() == keep.sum(-1).tolist()
    for b in range(B):
        assert index[b][valid[b]].tolist() == \
            keep[b].nonzero().flatten().tolist()
        # distinct indices per row: restore's scatter is deterministic
        assert len(set(index[b].tolist())) == index.shape[1]


@PROPS
@given(seed=seeds, B=batches, N=patches, C=st.integers(1, 4))
def test_restore_of_select_gives_x_on_kept_positions(seed, B, N, C):
    g = _gen(seed)
    x = torch.randn(B, N, C, generator=g)
    other = torch.randn(B, N, C, generator=g)
    keep = _keep_mask(g, B, N, at_least_one=False)
    index, valid = kept_indices(keep)
    selected = gather_tokens(x, index)
    # restore(select(x)) onto another grid: x where kept, the grid elsewhere
    restored = restore_tokens(other, selected, index, valid)
    torch.testing.assert_close(restored[keep], x[keep], rtol=0, atol=0)
    torch.testing.assert_close(restored[~keep], other[~keep], rtol=0, atol=0)
    # restoring onto x itself is the identity, whatever the padding holds
    noisy = torch.where(valid[..., None], selected,
                        torch.randn(selected.shape, generator=g))
    torch.testing.assert_close(restore_tokens(x, noisy, index, valid), x,
                               rtol=0, atol=0)


# --- padding invariance ------------------------------------------------------


@PROPS
@given(seed=seeds, B=batches, N=patches, h=st.integers(1, 2),
       d=st.integers(1, 4), mode=st.sampled_from(['logits', 'policy']))
def test_masked_keys_do_not_change_outputs_on_real_tokens(
        seed, B, N, h, d, mode):
    """``masked_attention`` with a policy on ``[cls; N]`` equals attention
    on the kept tokens alone, for every kept query (exact up to rounding
    with logits, up to the ``eps`` stabiliser with the policy softmax)."""
    g = _gen(seed)
    T = N + 1
    q, k, v = _attention_inputs(g, B, h, T, d)
    policy = torch.cat((torch.ones(B, 1, dtype=torch.bool),
                        _keep_mask(g, B, N)), 1)
    ctx, _ = masked_attention(q, k, v, d**-0.5, policy.float(), mode)
    # rounding (masked keys have weight exactly 0 with logits), and with
    # the policy softmax its stabiliser (eps = 1e-6, masked_attention's
    # default): (N + eps mean(v)) / (S + eps) - N / S with S >= 1 (the
    # row's largest visible weight is exp(0)) is at most 2 eps max|v|
    tol = attention_tol(q, k, v, d**-0.5)
    if mode == 'policy':
        tol += 2 * 1e-6 * float(v.abs().max())
    for b in range(B):
        idx = policy[b].nonzero().flatten()
        alone, _ = masked_attention(q[b:b + 1, :, idx], k[b:b + 1, :, idx],
                                    v[b:b + 1, :, idx], d**-0.5)
        torch.testing.assert_close(ctx[b:b + 1, :, idx], alone, rtol=0,
                                   atol=tol)


@PROPS
@given(seed=seeds, B=batches, N=patches, h=st.integers(1, 2),
       d=st.integers(1, 4))
def test_padded_batch_gives_each_image_what_it_gets_alone(seed, B, N, h, d):
    """``pad_kept_tokens`` + key mask: every image's real tokens come out as
    when the image runs alone with exactly its kept tokens."""
    g = _gen(seed)
    C = h * d
    tokens = torch.randn(B, 1 + N, C, generator=g, dtype=torch.float64)
    keep = _keep_mask(g, B, N)
    out, index, key_mask = pad_kept_tokens(tokens, keep)
    counts = keep.sum(-1)
    assert out.shape[1] == 1 + int(counts.max())
    if key_mask is None:
        key_mask = torch.ones(out.shape[:2], dtype=torch.bool)
    assert key_mask.sum(-1).tolist() == (1 + counts).tolist()

    def attend(t, mask=None):
        heads = t.view(t.shape[0], t.shape[1], h, d).transpose(1, 2)
        ctx, _ = masked_attention(heads, heads, heads, d**-0.5,
                                  None if mask is None else mask.float())
        return ctx.transpose(1, 2).reshape(t.shape)

    # padding filled with noise: the real tokens must not notice
    noisy = torch.where(
        key_mask[..., None], out,
        100 * torch.randn(out.shape, generator=g, dtype=out.dtype))
    batched = attend(noisy, key_mask)
    for b in range(B):
        alone, _, alone_mask = pad_kept_tokens(tokens[b:b + 1],
                                               keep[b:b + 1])
        assert alone_mask is None
        n = 1 + int(counts[b])
        assert_equal(out[b:b + 1, :n], alone)
        # the padding's weight is exactly 0 (MASKED_LOGIT), so the padded
        # row differs by rounding only: the bound of the image's own tokens
        # (q = k = v), with the padded row's length of summed keys
        heads = alone.view(1, n, h, d).transpose(1, 2)
        tol = attention_tol(heads, heads, heads, d**-0.5,
                             terms=2 * (out.shape[1] - n))
        torch.testing.assert_close(batched[b:b + 1, :n], attend(alone),
                                   rtol=0, atol=tol)


@PROPS
@given(seed=seeds, H=st.integers(1, 9), W=st.integers(1, 9),
       window=st.integers(1, 4), C=st.integers(1, 3))
def test_pad_partition_reverse_roundtrip(seed, H, W, window, C):
    g = _gen(seed)
    x = torch.randn(2, H, W, C, generator=g)
    padded, valid = pad_to_multiple(x, window)
    Hp, Wp = valid.shape
    assert Hp % window == 0 and Wp % window == 0
    assert Hp - H < window and Wp - W < window
    assert int(valid.sum()) == H * W and valid[:H, :W].all()
    windows = window_partition(padded, window)
    valid_w = window_partition(valid, window)
    assert windows.shape == (2 * Hp * Wp // window**2, window**2, C)
    assert valid_w.shape == (Hp * Wp // window**2, window**2)
    back = window_reverse(windows, window, Hp, Wp)
    torch.testing.assert_close(back[:, :H, :W], x, rtol=0, atol=0)


@PROPS
@given(seed=seeds, H=st.integers(1, 9), W=st.integers(1, 9),
       window=st.integers(2, 4), s=st.integers(1, 4),
       mode=st.sampled_from(['max', 'avg']))
def test_pooled_centres_ignore_padding(seed, H, W, window, s, mode):
    """Initial STViT centres of a padded map: noise in the padding changes
    nothing; a centre is valid iff its bin holds a real token."""
    s = min(s, window)
    g = _gen(seed)
    x = torch.randn(2, H, W, 3, generator=g)
    padded, valid = pad_to_multiple(x, window)
    valid_w = window_partition(valid, window)
    clean, ok = pool_centres(window_partition(padded, window),
                             (window, window), (s, s), mode, valid_w)
    noisy = padded.clone()
    noisy[:, ~valid] = 100 * torch.randn(noisy[:, ~valid].shape, generator=g)
    dirty, ok2 = pool_centres(window_partition(noisy, window),
                              (window, window), (s, s), mode, valid_w)
    assert torch.equal(ok, ok2)
    torch.testing.assert_close(dirty, clean, rtol=0, atol=0)
    assert (clean[~ok] == 0).all()
    if bool(valid.all()):  # no padding: torch's adaptive pooling
        pool = F.adaptive_max_pool2d if mode == 'max' else \
            F.adaptive_avg_pool2d
        w = window_partition(padded, window)
        ref = pool(w.view(-1, window, window, 3).permute(0, 3, 1, 2),
                   (s, s)).flatten(2).transpose(1, 2)
        if mode == 'max':  # a maximum is exact
            assert_equal(clean, ref)
        else:  # sum (x / c) against (sum x) / c over a bin of c <= w^2
            # tokens: 2 gamma_c max|x|
            torch.testing.assert_close(
                clean, ref, rtol=0, atol=rounding_tol(
                    x.dtype, window * window, float(x.abs().max())))


@PROPS
@given(seed=seeds, nh=st.integers(1, 3), nw=st.integers(1, 3),
       window=st.integers(1, 3), extra=st.integers(0, 5),
       cut_h=st.integers(0, 2), cut_w=st.integers(0, 2))
def test_gathered_regions_hold_exactly_the_masked_positions(
        seed, nh, nw, window, extra, cut_h, cut_w):
    """The two region forms agree: for each window, the valid gathered keys
    are the map positions that ``neighbourhood_mask`` marks, in raster
    order; padding is never a valid key."""
    g = _gen(seed)
    Hp, Wp = nh * window, nw * window
    size = window + extra
    valid = torch.zeros(Hp, Wp, dtype=torch.bool)
    valid[:max(1, Hp - cut_h), :max(1, Wp - cut_w)] = True
    x = torch.randn(1, Hp, Wp, 2, generator=g)
    keys, key_valid = neighbourhood_windows(x, valid, window, size)
    dense = neighbourhood_mask(valid, window, size)
    assert keys.shape[1] == min(size, Hp) * min(size, Wp)
    flat = x.view(-1, 2)
    for i in range(nh * nw):
        torch.testing.assert_close(keys[i][key_valid[i]], flat[dense[i]],
                                   rtol=0, atol=0)


# --- a batch of N equals N batches of one ------------------------------------


@PROPS
@given(seed=seeds, B=st.integers(2, 4), N=patches, h=st.integers(1, 3),
       d=st.integers(1, 4), m_th=st.floats(0.1, 0.99),
       theta=st.floats(0.0, 0.2), rho=st.floats(0.05, 1.0))
def test_batch_equals_one_image_at_a_time(seed, B, N, h, d, m_th, theta,
                                          rho):
    """Scores, keep masks and masked attention of a batch, row by row, are
    those of each image run alone."""
    g = _gen(seed)
    T = N + 1
    q, k, v = _attention_inputs(g, B, h, T, d)
    policy = torch.cat((torch.ones(B, 1), _keep_mask(g, B, N).float()), 1)

    tol = attention_tol(q, k, v, d**-0.5, terms=2 * h * T + 2 * N + 2 * d
                         + 4 * h + 8)

    def pipeline(q, k, v, policy):
        ctx, attn = masked_attention(q, k, v, d**-0.5, policy)
        tis = tis_score(attn, policy)
        asv = asvit_score(attn, ctx)
        valid = policy[:, 1:].bool()
        alive = valid.sum(-1)
        return (ctx, tis, asv,
                topk_keep_mask(tis, value_keep_counts(alive, rho), valid),
                mass_keep_mask(tis, m_th, valid)[0],
                threshold_keep_mask(asv, theta, valid=valid))

    batched = pipeline(q, k, v, policy)
    for b in range(B):
        alone = pipeline(q[b:b + 1], k[b:b + 1], v[b:b + 1],
                         policy[b:b + 1])
        ctx, tis, asv, value, mass, threshold = batched
        # context and scores: the attention's rounding, plus the scores'
        # own sums (TIS: h T rows and N columns; AS-ViT: norms of d and
        # sums over h) of values <= max(1, max|v|) (1 + S_l)
        for x, y in zip((ctx, tis, asv), alone[:3]):
            torch.testing.assert_close(x[b:b + 1], y, rtol=0, atol=tol)
        assert torch.equal(value[b:b + 1], alone[3])  # bool masks
        assert torch.equal(mass[b:b + 1], alone[4])
        # the straight-through value hard + soft - soft is hard up to two
        # roundings of values <= 2 per side
        torch.testing.assert_close(threshold[b:b + 1], alone[5], rtol=0,
                                   atol=rounding_tol(q.dtype, 2, 2.0))


@PROPS
@given(seed=seeds, B=st.integers(2, 3), H=st.integers(1, 8),
       W=st.integers(1, 8), window=st.integers(2, 4))
def test_window_pooling_batch_equals_one_image_at_a_time(
        seed, B, H, W, window):
    g = _gen(seed)
    x = torch.randn(B, H, W, 3, generator=g)
    padded, valid = pad_to_multiple(x, window)
    valid_w = window_partition(valid, window)
    centres, _ = pool_centres(window_partition(padded, window),
                              (window, window), (2, 2) if window > 2 else
                              (1, 1), 'max', valid_w)
    nW = valid_w.shape[0]
    for b in range(B):
        p, _ = pad_to_multiple(x[b:b + 1], window)
        alone, _ = pool_centres(window_partition(p, window), (window, window),
                                (2, 2) if window > 2 else (1, 1), 'max',
                                valid_w)
        torch.testing.assert_close(centres[b * nW:(b + 1) * nW], alone,
                                   rtol=0, atol=0)


@PROPS
@given(seed=seeds, B=st.integers(2, 3), n=st.integers(2, 10),
       d=st.integers(1, 4), init=st.sampled_from(['pool', 'random']))
def test_glad_batch_equals_one_image_at_a_time(seed, B, n, d, init):
    g = _gen(seed)
    torch.manual_seed(seed)
    m = int(torch.randint(1, n, (1, ), generator=g))
    glad = GLAD(n, m, d, init=init).double()
    x = torch.randn(B, n, d, generator=g, dtype=torch.float64)
    out = glad(x)
    assert out.shape == (B, m, d)
    # float64. y = W x: sums of n terms, S_y = |W| |x|; LayerNorm over d
    # channels divides by sigma = sqrt(var(y) + eps), so the errors of y,
    # of its mean and of its variance reach the output scaled by about
    # 1 / sigma (and |LN(y)| <= sqrt(d) times the variance's relative
    # error); GELU's slope is below 1.13: n = n + 2 d + 8, scale
    # 4 (max S_y / min sigma + d)
    with torch.no_grad():
        y = torch.einsum('mn,bnd->bmd', glad.weight, x)
        s_y = torch.einsum('mn,bnd->bmd', glad.weight.abs(), x.abs())
        sigma = (y.var(-1, unbiased=False) + glad.norm.eps).sqrt()
        scale = 4 * (float(s_y.max() / sigma.min()) + d)
    for b in range(B):
        torch.testing.assert_close(
            out[b:b + 1], glad(x[b:b + 1]), rtol=0,
            atol=rounding_tol(x.dtype, n + 2 * d + 8, scale))
    if init == 'pool':  # each output token averages consecutive inputs
        # c <= n weights fl(1 / c), rounded in float32 where GLAD was
        # built, added: 1 within float32's gamma_n
        torch.testing.assert_close(glad.weight.sum(-1),
                                   torch.ones(m, dtype=x.dtype), rtol=0,
                                   atol=rounding_tol(torch.float32, n, 1.0))
        assert (glad.weight.sum(0) > 0).all()
