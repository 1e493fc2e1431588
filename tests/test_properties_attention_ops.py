"""Property tests (hypothesis) of the shared attention pieces in
``mmvitaccel.ops.attention``: a masked key gets exactly no weight while its
row has an allowed key, bool and additive masks agree, the probe equals the
fused kernel, a per-window mask lands on the right windows, and the relative
position index and bias follow their definitions. Shapes are tiny; every
tensor comes from a seeded generator drawn by hypothesis."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mmvitaccel.ops import (additive_mask, attention_logits, attention_probs,
                            mask_logits, MASKED_LOGIT, masked_softmax,
                            relative_position_bias, relative_position_index,
                            window_mask)

from .tolerance import assert_equal, assert_rounding_close

#: modest and deterministic: no example database written into the tree
PROPS = settings(max_examples=30, deadline=None, database=None,
                 derandomize=True)

seeds = st.integers(0, 2**31 - 1)
sides = st.integers(1, 5)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _allowed(g, *shape):
    """Random bool mask, every row (last axis) allowing one key or more."""
    allowed = torch.rand(*shape, generator=g) < torch.rand(
        *shape[:-1], 1, generator=g)
    rows = allowed.view(-1, shape[-1])
    rows[torch.arange(rows.shape[0]),
         torch.randint(shape[-1], (rows.shape[0], ), generator=g)] = True
    return allowed


@PROPS
@given(seed=seeds, rows=st.integers(1, 6), keys=st.integers(1, 9),
       spread=st.floats(0.1, 50.))
def test_masked_softmax_is_the_softmax_over_the_allowed_keys(
        seed, rows, keys, spread):
    """Masked keys get exactly 0, the others the softmax over the allowed
    keys alone; the bool and the additive form agree; rows sum to 1."""
    g = _gen(seed)
    logits = torch.randn(2, rows, keys, generator=g) * spread
    allowed = _allowed(g, 2, rows, keys)
    probs = masked_softmax(logits, allowed)
    assert (probs[~allowed] == 0).all()
    reference = logits.masked_fill(~allowed, float('-inf')).softmax(-1)
    # bit-exact: the same softmax, exp(MASKED_LOGIT - max) is 0 as exp(-inf)
    assert_equal(probs, reference)
    # float32: the softmax's sum and this one, <= 9 terms each, scale 1
    assert_rounding_close(probs.sum(-1), torch.ones(2, rows), 2 * keys, 1.)
    assert torch.equal(probs, masked_softmax(logits, additive_mask(allowed)))
    assert torch.equal(mask_logits(logits), logits)


@PROPS
@given(seed=seeds, keys=st.integers(2, 9))
def test_masked_softmax_is_finite_in_half_precision(seed, keys):
    """MASKED_LOGIT stays finite in float16 beside logits of any size a
    model produces, and a fully masked row stays finite too."""
    g = _gen(seed)
    logits = (torch.randn(3, keys, generator=g) * 300).half()
    allowed = _allowed(g, 3, keys)
    allowed[0] = False  # a padding query: no allowed key at all
    masked = mask_logits(logits, allowed)
    assert torch.isfinite(masked).all()
    probs = masked_softmax(logits.float(), allowed)
    assert torch.isfinite(probs).all()
    assert (probs[1:][~allowed[1:]] == 0).all()
    assert MASKED_LOGIT > torch.finfo(torch.float16).min / 2


@PROPS
@given(seed=seeds, heads=st.integers(1, 3), nq=st.integers(1, 6),
       nk=st.integers(1, 6), d=st.integers(1, 8), use_bias=st.booleans())
def test_attention_probs_match_the_fused_kernel(seed, heads, nq, nk, d,
                                                use_bias):
    """``attention_probs(q, k) @ v`` equals torch's scaled dot-product
    attention with the same scale, bias and bool mask."""
    g = _gen(seed)
    double = dict(generator=g, dtype=torch.double)
    q = torch.randn(2, heads, nq, d, **double)
    k, v = (torch.randn(2, heads, nk, d, **double) for _ in range(2))
    bias = torch.randn(heads, nq, nk, **double) if use_bias else None
    allowed = _allowed(g, 2, 1, nq, nk)
    scale = d**-0.5
    probs = attention_probs(q, k, scale, bias, allowed)
    assert probs.shape == (2, heads, nq, nk)
    fused_mask = additive_mask(allowed, q.dtype) + \
        (0 if bias is None else bias)
    fused = F.scaled_dot_product_attention(q, k, v, attn_mask=fused_mask,
                                           scale=scale)
    # float64, the other kernel's order: sums of d products (logits up to
    # S = d scale max|q| max|k| + max|bias|, whose rounding moves the
    # weights by as much, relative), softmax and values over nk keys
    logit_scale = d * scale * float(q.abs().max() * k.abs().max()) + (
        0. if bias is None else float(bias.abs().max()))
    assert_rounding_close(probs @ v, fused, d + 2 * nk,
                          float(v.abs().max()) * (1 + logit_scale))
    # (q scale) k^T against (q k^T) scale: d products and one more product
    assert_rounding_close(attention_logits(q, k, scale),
                          q @ k.transpose(-2, -1) * scale, d + 1,
                          d * scale * float(q.abs().max() * k.abs().max()))


@PROPS
@given(seed=seeds, images=st.integers(1, 3), windows=st.integers(1, 4),
       n=st.integers(1, 5))
def test_window_mask_gives_each_window_its_mask(seed, images, windows, n):
    """Window ``b * nW + w`` of a batch gets ``mask[w]``, as Swin's
    ``view(B, nW, ...) + mask`` broadcasting gives it."""
    g = _gen(seed)
    mask = torch.randn(windows, n, n, generator=g)
    logits = torch.randn(images * windows, 2, n, n, generator=g)
    out = logits + window_mask(mask, images * windows)
    swin = (logits.view(images, windows, 2, n, n) + mask[:, None]).view(
        -1, 2, n, n)
    assert torch.equal(out, swin)


def test_window_mask_refuses_a_batch_of_partial_images():
    with pytest.raises(ValueError, match='6 windows are not a multiple'):
        window_mask(torch.zeros(4, 2, 2), 6)


@PROPS
@given(wh=sides, ww=sides)
def test_relative_position_index_depends_on_the_offset_only(wh, ww):
    """``index[i, j]`` is ``(dy + Wh - 1) (2 Ww - 1) + dx + Ww - 1`` of the
    offset ``p_i - p_j``: one table row per offset, all rows in range."""
    index = relative_position_index((wh, ww))
    n = wh * ww
    assert index.shape == (n, n) and index.dtype == torch.long
    for i in range(n):
        for j in range(n):
            dy, dx = i // ww - j // ww, i % ww - j % ww
            assert index[i, j] == (dy + wh - 1) * (2 * ww - 1) + dx + ww - 1
    assert int(index.min()) >= 0
    assert int(index.max()) < (2 * wh - 1) * (2 * ww - 1)
    assert torch.equal(relative_position_index(wh),
                       relative_position_index((wh, wh)))


@PROPS
@given(seed=seeds, wh=sides, ww=sides, heads=st.integers(1, 4))
def test_relative_position_bias_gathers_the_table(seed, wh, ww, heads):
    """``bias[h, i, j] == table[index[i, j], h]``."""
    g = _gen(seed)
    table = torch.randn((2 * wh - 1) * (2 * ww - 1), heads, generator=g)
    index = relative_position_index((wh, ww))
    bias = relative_position_bias(table, index)
    assert bias.shape == (heads, wh * ww, wh * ww) and bias.is_contiguous()
    assert torch.equal(bias, table[index].permute(2, 0, 1))
