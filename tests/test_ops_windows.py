"""Window geometry and padding masks (mmvitaccel.ops.windows)."""
import pytest
import torch

from mmvitaccel.ops import (neighbourhood_windows, pad_to_multiple,
                            window_partition, window_reverse)


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
    big = torch.zeros(B, H + k, W + k, C)
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
    x = torch.randn(1, H, W, 4)
    valid = torch.ones(H, W, dtype=torch.bool)
    valid[H - 2:, :] = False  # padding rows
    keys, key_valid = neighbourhood_windows(x, valid, w, k)
    assert keys.shape[1] == min(k, H) * min(k, W)
    ref_keys, ref_inside = _reference_regions(x, w, k)
    ref_valid = ref_inside & _reference_regions(
        valid[None, ..., None].float(), w, k)[0][..., 0].bool()
    q = torch.randn(keys.shape[0], w * w, 4)
    torch.testing.assert_close(
        _masked_attention(q, keys, key_valid),
        _masked_attention(q, ref_keys, ref_valid))


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
