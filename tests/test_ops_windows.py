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


def test_neighbourhood_matches_slicing():
    B, H, W, C, w, k = 2, 14, 21, 3, 7, 14  # l=3, r=4 (asymmetric)
    x = torch.randn(B, H, W, C)
    valid = torch.ones(H, W, dtype=torch.bool)
    keys, key_valid = neighbourhood_windows(x, valid, w, k)
    nW = (H // w) * (W // w)
    assert keys.shape == (B * nW, k * k, C)
    big = torch.zeros(B, H + k, W + k, C)
    big[:, 3:3 + H, 3:3 + W] = x
    for b in range(B):
        for a in range(H // w):
            for c in range(W // w):
                idx = b * nW + a * (W // w) + c
                region = big[b, a * w:a * w + k, c * w:c * w + k]
                assert torch.equal(keys[idx].view(k, k, C), region)
    # window (0, 0): the first 3 rows and columns lie outside the map
    v = key_valid[0].view(k, k)
    assert not v[:3].any() and not v[:, :3].any() and v[3:, 3:].all()


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
