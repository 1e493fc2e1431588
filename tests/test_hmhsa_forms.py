"""hMHSA's forms (mmvitaccel.ops.hmhsa / hmhsa_fused): the fused form (IHH
on the keys, real heads in SDPA) and the stacked form (IHH on the keys, one
product and one softmax) are the explicit one (maps, then IHH and CHH),
values and gradients, with class token, bias, masks; their FLOPs are counted
as they run; the option is checked."""
import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st

import mmvitaccel  # noqa: F401
from mmvitaccel.analysis.flops import count_flops
from mmvitaccel.models import (HViTDeiT, HViTPyramidVisionTransformerV2,
                               HViTSwinTransformer)
from mmvitaccel.models.hvit import HallucinatedWindowMSA
from mmvitaccel.ops import (MASKED_LOGIT, AttentionHallucination,
                            hallucinated_attention, hallucinated_keys,
                            hmhsa_flops, resolve_hmhsa_form)

from .test_hvit import HOST_TERMS, TINY_DEIT, TINY_PVT, TINY_SWIN
from .tolerance import assert_equal, assert_rounding_close
from .utils import assert_twin_matches


def _region_mask(batch, n, regions, kind, generator):
    """A Swin-like mask: key ``p`` visible to query ``i`` iff same region."""
    label = torch.randint(0, regions, (batch, n), generator=generator)
    allowed = label[:, :, None] == label[:, None, :]
    if kind == 'bool':
        return allowed[:, None]
    value = -100. if kind == 'swin' else MASKED_LOGIT
    return torch.zeros(allowed.shape, dtype=torch.double).masked_fill(
        ~allowed, value)[:, None]


def _inputs(case, dtype=torch.double):
    """The hallucination module, ``q, k, v`` (requiring grad), bias and
    mask of a case."""
    g = torch.Generator().manual_seed(case['seed'])
    B, h, d, (Hk, Wk), extra = (case[k] for k in ('batch', 'heads', 'dims',
                                                  'grid', 'extra'))
    nk = extra + Hk * Wk
    nq = nk if case['self'] else case['nq']
    hal = AttentionHallucination(h, case['kernel']).to(dtype)
    with torch.no_grad():
        for p in hal.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=dtype) * 0.5)

    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype).requires_grad_()

    q, k, v = rand(B, h // 2, nq, d), rand(B, h // 2, nk, d), rand(B, h, nk, d)
    bias = torch.randn(h, nq, nk, generator=g, dtype=dtype) \
        if case['bias'] else None
    mask = _region_mask(B, nk, 3, case['mask'], g) if case['mask'] else None
    if mask is not None and mask.dtype != torch.bool:
        mask = mask.to(dtype)
    return hal, q, k, v, bias, mask, g


def _both_forms(case, dtype=torch.double):
    """Outputs and gradients (``q, k, v`` and the weights) of both forms."""
    hal, q, k, v, bias, mask, g = _inputs(case, dtype)
    res = []
    for form in ('explicit', 'fused', 'stacked'):
        out = hallucinated_attention(q, k, v, hal, case['grid'],
                                     case['extra'], bias=bias, mask=mask,
                                     form=form)
        weights = torch.randn(out.shape, generator=g.manual_seed(1),
                              dtype=dtype)
        grads = torch.autograd.grad((out * weights).sum(),
                                    [q, k, v, *hal.parameters()])
        res.append((out, grads))
    return res


@st.composite
def cases(draw):
    mask = draw(st.sampled_from([None, 'swin', 'bool', 'additive']))
    return dict(
        seed=draw(st.integers(0, 2**16)),
        batch=draw(st.integers(1, 2)),
        heads=draw(st.sampled_from([2, 4, 6])),
        dims=draw(st.integers(1, 6)),
        grid=(draw(st.integers(1, 5)), draw(st.integers(1, 5))),
        # a region mask is over one token set, all on the grid (Swin)
        extra=0 if mask else draw(st.integers(0, 2)),
        self=True if mask else draw(st.booleans()),
        nq=draw(st.integers(1, 9)),
        bias=draw(st.booleans()),
        mask=mask,
        kernel=draw(st.sampled_from([1, 3, 5])))


def _terms(case):
    """Accumulation lengths (:mod:`tests.tolerance`) of a case's outputs
    and gradients: the chain of logits (``d``), IHH taps (``k^2``), CHH
    (``h / 2`` maps), softmax and values (``N_k`` each); backward the chain
    again, and the filters' gradients sum over ``B h/2 N_q N_k`` entries of
    the maps."""
    nk = case['extra'] + case['grid'][0] * case['grid'][1]
    nq = nk if case['self'] else case['nq']
    maps = case['heads'] // 2
    chain = case['dims'] + case['kernel']**2 + maps + 2 * nk
    return chain, 2 * chain + case['batch'] * maps * nq * nk


def _assert_forms_agree(case, dtype):
    """The key-side forms' outputs and gradients against the explicit
    form's, within the rounding of their sums (scale: the largest value,
    or 1)."""
    (ref, ref_grads), *others = _both_forms(case, dtype)
    out_terms, grad_terms = _terms(case)
    for out, grads in others:
        assert_rounding_close(out, ref, out_terms, msg='output')
        for i, (a, b) in enumerate(zip(grads, ref_grads)):
            assert_rounding_close(a, b, grad_terms, msg=f'gradient {i}')


@settings(max_examples=60, deadline=None)
@given(case=cases())
def test_key_side_forms_equal_explicit_form_float64(case):
    _assert_forms_agree(case, torch.double)


@settings(max_examples=15, deadline=None)
@given(case=cases())
def test_key_side_forms_equal_explicit_form_float32(case):
    """float32 (the kernels of training: SDPA, the float32 products)."""
    _assert_forms_agree(case, torch.float32)


@settings(max_examples=40, deadline=None)
@given(case=cases())
def test_every_form_in_inference_equals_the_training_path(case):
    """Without gradients IHH runs as one sparse product
    (``key_filter_operator``): on the maps in the explicit form (any batch,
    masks), on the keys at batch 1 in the key-side forms. Every form's
    inference output equals the explicit form with gradients on (the
    convolutions)."""
    hal, q, k, v, bias, mask, _ = _inputs(case)
    args = (q, k, v, hal, case['grid'], case['extra'])
    ref = hallucinated_attention(*args, bias=bias, mask=mask,
                                 form='explicit')
    assert '_key_operator' not in hal.ihh.__dict__
    for form in ('explicit', 'fused', 'stacked'):
        with torch.no_grad():
            out = hallucinated_attention(*args, bias=bias, mask=mask,
                                         form=form)
        assert_rounding_close(out, ref, _terms(case)[0], msg=form)
    assert '_key_operator' in hal.ihh.__dict__


@settings(max_examples=40, deadline=None)
@given(grid=st.tuples(st.integers(1, 6), st.integers(1, 6)),
       extra=st.integers(0, 2), maps=st.integers(1, 4),
       kernel=st.sampled_from([1, 3, 5]), seed=st.integers(0, 2**16))
def test_sparse_key_operator_is_the_key_filter(grid, extra, maps, kernel,
                                               seed):
    """``M K`` (one sparse product, inference at batch 1) equals the
    convolution on the key grid (training path), class tokens included,
    and is rebuilt when the filter changes in place or the grid changes."""
    g = torch.Generator().manual_seed(seed)
    hal = AttentionHallucination(2 * maps, kernel).double()
    with torch.no_grad():
        hal.ihh.conv.weight.copy_(
            torch.randn(hal.ihh.conv.weight.shape, generator=g,
                        dtype=torch.double))
    k = torch.randn(1, maps, extra + grid[0] * grid[1], 3, generator=g,
                    dtype=torch.double)

    def check(grid):
        kk = k[:, :, :extra + grid[0] * grid[1]]
        ref = hallucinated_keys(kk, hal.ihh, grid, extra)  # conv
        with torch.no_grad():
            out = hallucinated_keys(kk, hal.ihh, grid, extra)
        assert hal.ihh.__dict__['_key_operator'][0][-3] == grid
        # sums of k^2 taps, each at most max |w| max |k|
        w = hal.ihh.conv.weight.detach()
        assert_rounding_close(out, ref, kernel**2, kernel**2 * float(
            w.abs().max() * kk.abs().max()))

    check(grid)
    with torch.no_grad():
        hal.ihh.conv.weight.mul_(-2.0).add_(0.25)  # an optimiser step
    check(grid)
    check((1, grid[1]))


def test_sparse_filter_only_in_float_inference():
    """bfloat16 keys and maps, and anything with gradients on, take the
    convolutions (torch's sparse products are float32/float64 on the
    CPU)."""
    hal = AttentionHallucination(4).to(torch.bfloat16)
    k = torch.randn(1, 2, 10, 4, dtype=torch.bfloat16)
    maps = torch.randn(2, 2, 5, 10, dtype=torch.bfloat16)
    with torch.no_grad():
        hallucinated_keys(k, hal.ihh, (3, 3), 1)
        hal.hallucinate(maps, (3, 3), 1)
    assert '_key_operator' not in hal.ihh.__dict__
    hal.float()
    hal.hallucinate(maps.float(), (3, 3), 1)  # gradients on
    assert '_key_operator' not in hal.ihh.__dict__


def test_hallucinated_keys_turn_ihh_on_the_maps_into_a_key_filter():
    """``Q K'^T == IHH(Q K^T)`` row by row, class token: centre tap only."""
    torch.manual_seed(0)
    hal = AttentionHallucination(4).double()
    nn.init.normal_(hal.ihh.conv.weight)
    q = torch.randn(1, 2, 5, 3, dtype=torch.double)
    k = torch.randn(1, 2, 1 + 3 * 4, 3, dtype=torch.double)
    kh = hallucinated_keys(k, hal.ihh, (3, 4), num_extra=1)
    # d = 3 products in 9 taps, each at most max|w| max|q| max|k|
    scale = 27 * float(hal.ihh.conv.weight.detach().abs().max() *
                       q.abs().max() * k.abs().max())
    assert_rounding_close(q @ kh.transpose(-2, -1).detach(),
                          hal.ihh(q @ k.transpose(-2, -1), (3, 4),
                                  1).detach(), 3 + 9, scale)
    centre = hal.ihh.conv.weight[:, 0, 1, 1].view(1, 2, 1)
    assert_equal(kh[:, :, 0], k[:, :, 0] * centre)  # one product each


def test_fused_form_refuses_a_mask_it_cannot_reproduce():
    hal = AttentionHallucination(2)
    q, k, v = torch.randn(1, 1, 5, 4), torch.randn(1, 1, 5, 4), \
        torch.randn(1, 2, 5, 4)
    mask = torch.zeros(1, 1, 5, 5)
    mask[..., -1] = -100.
    for form in ('fused', 'stacked'):
        with pytest.raises(ValueError, match='region mask'):
            hallucinated_attention(q, k, v, hal, (2, 2), 1, mask=mask,
                                   form=form)
    # 'auto' runs the explicit form for such a mask
    torch.testing.assert_close(
        hallucinated_attention(q, k, v, hal, (2, 2), 1, mask=mask),
        hallucinated_attention(q, k, v, hal, (2, 2), 1, mask=mask,
                               form='explicit'), rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"form must be one of \('explicit'"):
        hallucinated_attention(q, k, v, hal, (2, 2), 1, form='flash')


def test_auto_rule():
    """Explicit with a mask (Swin's shifted windows), stacked for a single
    map (PVTv2-b1's stage 2), fused otherwise (DeiT-S, Swin-T, PVTv2-b1's
    stage 4), as measured on the hosts' shapes."""
    for g in (1, 3, 6):
        assert resolve_hmhsa_form('auto', g, masked=True) == 'explicit'
    assert resolve_hmhsa_form('auto', 1) == 'stacked'  # PVTv2-b1 stage 2
    for g in (3, 4, 6, 12):  # DeiT-S, PVTv2-b1 stage 4, Swin-T
        assert resolve_hmhsa_form('auto', g) == 'fused'
    for form in ('explicit', 'fused', 'stacked'):
        assert resolve_hmhsa_form(form, 12, masked=True) == form


@pytest.mark.parametrize('form', ['explicit', 'fused', 'stacked', 'auto'])
@pytest.mark.parametrize('heads', [2, 4])
@pytest.mark.parametrize('shift', [False, True])
def test_counted_flops_follow_the_form_that_runs(form, heads, shift):
    """The counter sees what runs: Swin's window attention, masked or not,
    one map (g = 1: the fused form folds CHH into the query) or two."""
    C, w, nW = 48, 5, 2
    attn = HallucinatedWindowMSA(C, (w, w), heads, hmhsa_form=form)
    x = torch.randn(nW, w * w, C)
    mask = _region_mask(nW, w * w, 2, 'swin', torch.Generator()).float()[
        :, 0] if shift else None
    counted = count_flops(attn, (x, mask)).total
    assert counted == nW * hmhsa_flops(w * w, C, heads, form=form,
                                       masked=shift)
    # with d = 24 > k^2 the key-side forms pay one more product: more FLOPs
    assert hmhsa_flops(w * w, C, heads, form='stacked') > \
        hmhsa_flops(w * w, C, heads, form='explicit')


HOSTS = {
    'deit': (lambda **kw: HViTDeiT(arch=TINY_DEIT, **kw), (2, 3, 48, 64)),
    'pvt': (lambda **kw: HViTPyramidVisionTransformerV2(**TINY_PVT, **kw),
            (1, 3, 96, 64)),
    'swin': (lambda **kw: HViTSwinTransformer(
        arch=TINY_SWIN, window_size=4, **kw), (1, 3, 128, 128)),
}


@pytest.mark.parametrize('host', sorted(HOSTS))
def test_hosts_give_the_same_output_in_every_form(host):
    build, shape = HOSTS[host]
    torch.manual_seed(0)
    ref = build(hmhsa_form='explicit').double()
    ref.eval()  # (mmpretrain's Swin.train returns None)
    x = torch.randn(*shape, dtype=torch.double)
    with torch.no_grad():
        expected = ref(x)
    for form in ('fused', 'stacked'):
        assert_twin_matches(build(hmhsa_form=form).double(), ref, x, expected,
                            HOST_TERMS)


@pytest.mark.parametrize('host', sorted(HOSTS))
def test_hosts_refuse_an_unknown_form(host):
    build, _ = HOSTS[host]
    with pytest.raises(ValueError,
                       match=r"hmhsa_form must be one of \('explicit', "
                       r"'fused', 'stacked', 'auto'\), got 'flash'"):
        build(hmhsa_form='flash')


def test_inference_stacks_the_projections_and_sees_new_weights():
    """Without gradients Q^, K^, V come from one product with the stacked
    weights, kept between calls; an in-place update or a loaded checkpoint
    must rebuild it."""
    torch.manual_seed(0)
    attn = HallucinatedWindowMSA(48, (4, 4), 4).double()
    attn.eval()
    x = torch.randn(3, 16, 48, dtype=torch.double)

    def check():
        ref = attn(x)  # gradients on: three products
        with torch.no_grad():
            out = attn(x)
        assert '_qkv_cache' in attn.__dict__
        # C = 48 for q/k/v and proj, d = 12, 9 taps, 2 maps, 16 keys twice
        assert_rounding_close(out, ref, 48 + 12 + 9 + 2 + 32 + 48)

    check()
    with torch.no_grad():
        attn.k.weight.add_(0.5)  # an optimiser step
    check()
    other = HallucinatedWindowMSA(48, (4, 4), 4).double()
    attn.load_state_dict(other.state_dict())
    check()


def test_window_attention_reads_the_shift_mask_as_regions():
    """Upstream's -100 shift mask and the allowed/forbidden mask that
    HallucinatedWindowMSA makes of it give the same output (the -100 weights
    are ~4e-44 of the row), in every form."""
    torch.manual_seed(0)
    C, w, nW = 24, 4, 3
    attn = HallucinatedWindowMSA(C, (w, w), 4).double()
    attn.eval()
    x = torch.randn(2 * nW, w * w, C, dtype=torch.double)
    allowed = _region_mask(nW, w * w, 2, 'bool', torch.Generator())[:, 0]
    shift = torch.zeros(allowed.shape, dtype=torch.double).masked_fill(
        ~allowed, -100.)
    with torch.no_grad():
        out = attn(x, shift)
        q, k, v = (t.reshape(2 * nW, w * w, -1, C // 4).transpose(1, 2)
                   for t in (attn.q(x), attn.k(x), attn.v(x)))
        bias = attn.relative_position_bias_table[
            attn.relative_position_index.view(-1)].view(
                w * w, w * w, -1).permute(2, 0, 1)
        ref = hallucinated_attention(q, k, v, attn.hallucination, (w, w),
                                     scale=attn.scale, bias=bias,
                                     mask=shift.repeat(2, 1, 1)[:, None],
                                     form='explicit')
        ref = attn.proj(ref.transpose(1, 2).reshape(2 * nW, w * w, C))
    # C = 24 for q/k/v and proj, d = 6, 9 taps, 2 maps, 16 keys twice
    assert_rounding_close(out, ref, 24 + 6 + 9 + 2 + 32 + 24)
