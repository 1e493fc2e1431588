"""Window geometry and padding masks (mmvitaccel.ops.windows)."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmvitaccel.ops import (covered_token_windows, covered_tokens_mask,
                            neighbourhood_mask, neighbourhood_windows,
                            pad_to_multiple, region_windows_with_tokens,
                            window_partition, window_reverse)

from .tolerance import assert_rounding_close


def test_pad_and_partition_roundtrip():
    x = torch.randn(2, 10, 13, 4)
    xp, valid = pad_to_multiple(x, 7)
    assert xp.shape == (2, 14, 14, 4) and valid.shape == (14, 14)
    assert valid.sum() == 10 * 13 and not valid[10:].any() and \
        not valid[:, 13:].any()
    windows = window_partition(xp, 7)
    assert windows.shape == (2 * 4, 49, 4)
    # window 1 of image 0 is rows 0-6, cols 7-13
    assert torch.equal(windows[1].view(7, 7, 4), xp[0, :7, 7:])
    assert torch.equal(window_reverse(windows, 7, 14, 14), xp)
    mask_windows = window_partition(valid, 7)
    assert mask_windows.shape == (4, 49)
    assert mask_windows[3].sum() == 3 * 6


def _reference_regions(x, w, k):
    """Every window's k x k region of the zero-padded map, sliced by hand,
    and whether each position lies inside the map."""
    B, H, W, C = x.shape
    left = (k - w) // 2
    big = x.new_zeros(B, H + k, W + k, C)
    big[:, left:left + H, left:left + W] = x
    inside = torch.zeros(H + k, W + k, dtype=torch.bool)
    inside[left:left + H, left:left + W] = True
    keys, valid = [], []
    for b in range(B):
        for a in range(H // w):
            for c in range(W // w):
                keys.append(big[b, a * w:a * w + k, c * w:c * w + k])
                if b == 0:
                    valid.append(inside[a * w:a * w + k, c * w:c * w + k])
    return (torch.stack(keys).view(-1, k * k, C),
            torch.stack(valid).view(-1, k * k))


def _masked_attention(q, keys, valid):
    logits = torch.einsum('nqc,nkc->nqk', q, keys)
    logits = logits.masked_fill(~valid[:, None], float('-inf'))
    return torch.einsum('nqk,nkc->nqc', logits.softmax(-1), keys)


def test_neighbourhood_matches_slicing():
    B, H, W, C, w, k = 2, 14, 21, 3, 7, 14  # l=3, r=4 (asymmetric)
    x = torch.randn(B, H, W, C)
    valid = torch.ones(H, W, dtype=torch.bool)
    keys, key_valid = neighbourhood_windows(x, valid, w, k)
    nW = (H // w) * (W // w)
    assert keys.shape == (B * nW, k * k, C)
    ref_keys, ref_valid = _reference_regions(x, w, k)
    assert torch.equal(key_valid, ref_valid)
    assert torch.equal(keys * key_valid.repeat(B, 1)[..., None], ref_keys)
    # window (0, 0): the first 3 rows and columns lie outside the map
    v = key_valid[0].view(k, k)
    assert not v[:3].any() and not v[:, :3].any() and v[3:, 3:].all()


@pytest.mark.parametrize('H,W,w,k', [(6, 6, 3, 27), (14, 14, 7, 21),
                                     (12, 21, 3, 15), (14, 28, 7, 21)])
def test_regions_longer_than_the_map_are_clipped_exactly(H, W, w, k):
    """A region longer than an axis reads the whole axis once: fewer keys,
    the same masked attention as the full zero-padded region."""
    x = torch.randn(1, H, W, 4, dtype=torch.double)
    valid = torch.ones(H, W, dtype=torch.bool)
    valid[H - 2:, :] = False  # padding rows
    keys, key_valid = neighbourhood_windows(x, valid, w, k)
    assert keys.shape[1] == min(k, H) * min(k, W)
    ref_keys, ref_inside = _reference_regions(x, w, k)
    ref_valid = ref_inside & _reference_regions(
        valid[None, ..., None].float(), w, k)[0][..., 0].bool()
    q = torch.randn(keys.shape[0], w * w, 4, dtype=torch.double)
    # float64, sums of d = 4 and of <= k^2 keys (twice) in another layout;
    # logits up to 4 max|q| max|x| (their rounding moves the weights by as
    # much, relative) times values up to max|x|
    scale = float(x.abs().max()) * (1 + 4 * float(q.abs().max() *
                                                  x.abs().max()))
    assert_rounding_close(_masked_attention(q, keys, key_valid),
                          _masked_attention(q, ref_keys, ref_valid),
                          4 + 2 * k * k, scale)


def test_neighbourhood_ignores_padding_content():
    x = torch.randn(1, 12, 12, 5)
    xp, valid = pad_to_multiple(x, 7)
    noisy = xp.clone()
    noisy[:, ~valid] = torch.randn_like(noisy[:, ~valid])
    k1, v1 = neighbourhood_windows(xp, valid, 7, 21)
    k2, v2 = neighbourhood_windows(noisy, valid, 7, 21)
    assert torch.equal(v1, v2)
    assert torch.equal(k1[:, v1[0]][0], k2[:, v2[0]][0])
    assert torch.equal(k1 * v1[..., None], k2 * v2[..., None])


def test_bad_sizes_refused():
    with pytest.raises(ValueError, match='smaller than the window'):
        neighbourhood_windows(torch.zeros(1, 7, 7, 1),
                              torch.ones(7, 7, dtype=torch.bool), 7, 5)
    with pytest.raises(ValueError, match='not a multiple'):
        window_partition(torch.zeros(1, 8, 7, 1), 7)


# keys each 7x7 window of the 14x14 stage-3 map (224 px) sees, per window
# in raster order: 'inside' is the authors' classification unfold (kernel
# k, no padding: 10 -> stride 4, 14 -> the whole map); 'centred' the
# detection code's centred region with the out-of-map part dropped
KEYS_AT_224 = {
    (10, 'inside'): [100] * 4,
    (14, 'inside'): [196] * 4,
    (10, 'centred'): [81, 72, 72, 64],
    (14, 'centred'): [121, 110, 110, 100],
}


@pytest.mark.parametrize('k,placement', sorted(KEYS_AT_224))
def test_keys_per_window_at_224(k, placement):
    valid = torch.ones(14, 14, dtype=torch.bool)
    expected = KEYS_AT_224[k, placement]
    assert neighbourhood_mask(valid, 7, k, placement).sum(1).tolist() == \
        expected
    _, key_valid = neighbourhood_windows(
        torch.zeros(1, 14, 14, 1), valid, 7, k, placement)
    assert key_valid.sum(1).tolist() == expected


def test_inside_regions_are_the_authors_unfold_at_224():
    """At 224 px the 'inside' regions are F.unfold(kernel=k, stride=14-k)
    of the 14x14 map without padding, window for window."""
    x = torch.randn(1, 14, 14, 3)
    valid = torch.ones(14, 14, dtype=torch.bool)
    for k in (10, 14):
        keys, key_valid = neighbourhood_windows(x, valid, 7, k, 'inside')
        assert key_valid.all()
        unfold = torch.nn.functional.unfold(
            x.permute(0, 3, 1, 2), kernel_size=k, stride=max(14 - k, 1))
        ref = unfold.view(3, k * k, -1).permute(2, 1, 0)  # (n, k*k, C)
        assert torch.equal(keys, ref.expand(4, -1, -1))  # 14: one region


def test_inside_regions_stay_in_the_real_map():
    """With padding, an 'inside' region is moved inside the real map: it
    holds min(k, H) real rows, and padding content does not matter."""
    x = torch.randn(1, 12, 19, 2)
    xp, valid = pad_to_multiple(x, 7)  # 14 x 21
    mask = neighbourhood_mask(valid, 7, 10, 'inside')
    assert mask.sum(1).tolist() == [100] * 6
    keys, key_valid = neighbourhood_windows(xp, valid, 7, 10, 'inside')
    assert torch.equal(key_valid.sum(1), mask.sum(1))
    dense = [xp.reshape(-1, 2)[m] for m in mask]
    for n in range(6):
        assert torch.equal(keys[n][key_valid[n]], dense[n])


@pytest.mark.parametrize('H,W,k,placement', [(14, 14, 14, 'inside'),
                                             (35, 28, 21, 'centred'),
                                             (35, 28, 14, 'centred'),
                                             (33, 26, 14, 'inside')])
def test_covered_windows_tokens(H, W, k, placement):
    """The per-window tokens in a region are those of the windows lying
    entirely in it; the gathered and dense forms agree."""
    t = 3
    xp, valid = pad_to_multiple(torch.zeros(1, H, W, 1), 7)
    nh, nw = xp.shape[1] // 7, xp.shape[2] // 7
    grid = torch.arange(nh * t * nw * t, dtype=torch.float)
    grid = grid.view(1, nh * t, nw * t, 1)
    grid_valid = torch.ones(nh * t, nw * t, dtype=torch.bool)
    dense = covered_tokens_mask(valid, 7, k, t, placement)
    tokens, tok_valid = covered_token_windows(grid, grid_valid, valid, 7, k,
                                              placement)
    region = neighbourhood_mask(valid, 7, k, placement).view(-1, *valid.shape)
    real = valid.view(nh, 7, nw, 7).permute(0, 2, 1, 3).reshape(nh * nw, -1)
    for n in range(nh * nw):
        got = sorted(tokens[n, tok_valid[n], 0].long().tolist())
        assert got == dense[n].nonzero()[:, 0].tolist()
        # window c is covered iff its real tokens all lie in the region
        for c in range(nh * nw):
            a, b = divmod(c, nw)
            inside = bool(region[n, a * 7:a * 7 + 7, b * 7:b * 7 + 7][
                real[c].view(7, 7)].all())
            first = (a * t) * nw * t + b * t
            assert bool(dense[n, first]) == inside
        assert dense[n].view(nh, t, nw, t)[n // nw, :, n % nw].all()
    if (H, W, k, placement) == (14, 14, 14, 'inside'):
        assert dense.all()  # at 224 px every window sees all 36 tokens


def test_unknown_placement_refused():
    with pytest.raises(ValueError, match="key_region 'middle'"):
        neighbourhood_mask(torch.ones(7, 7, dtype=torch.bool), 7, 7,
                           'middle')


@settings(max_examples=40, deadline=None)
@given(h=st.integers(1, 30), w=st.integers(1, 30), batch=st.integers(1, 2),
       window=st.integers(1, 7), extra=st.integers(0, 15),
       tokens=st.integers(1, 3),
       placement=st.sampled_from(['centred', 'inside']),
       seed=st.integers(0, 2**16))
def test_one_gather_equals_tokens_then_region(h, w, batch, window, extra,
                                              tokens, placement, seed):
    """region_windows_with_tokens is covered_token_windows and
    neighbourhood_windows concatenated per window, bit for bit, padding and
    clipped regions included."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, h, w, 3, generator=g)
    xp, valid = pad_to_multiple(x, window)
    nh, nw = xp.shape[1] // window, xp.shape[2] // window
    grid = torch.randn(batch, nh * tokens, nw * tokens, 3, generator=g)
    grid_valid = torch.rand(nh * tokens, nw * tokens, generator=g) > 0.2
    size = window + extra
    sem, sem_valid = covered_token_windows(grid, grid_valid, valid, window,
                                           size, placement)
    keys, key_valid = neighbourhood_windows(xp, valid, window, size,
                                            placement)
    got, got_valid = region_windows_with_tokens(xp, valid, grid, grid_valid,
                                                window, size, placement)
    assert torch.equal(got, torch.cat((sem, keys), dim=1))
    assert torch.equal(got_valid, torch.cat((sem_valid, key_valid), dim=1))
