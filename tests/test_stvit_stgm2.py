"""STGM-2 keys (the paper's Eq. 3) and the key regions of STViT on Swin.

``S2 = MHA(S1 + G, Concat(S1, X), Concat(S1, X)) + S1``: with the default
``stgm2_keys='semantic_and_image'`` each window's semantic tokens attend to
the ``S1`` of the windows lying entirely in their ``w_k`` region and to the
image tokens of that region; ``'image'`` keeps ``X`` only.
"""
import pytest
import torch

from mmvitaccel.models import (STViTRSwinTransformer, STViTSwinTransformer,
                               STViTSwinTransformer3D)
from mmvitaccel.models.stvit import dumbbell_swin_stage
from mmvitaccel.models.stvit import semantic_swin_stage
from mmvitaccel.ops import pad_to_multiple, window_reverse

from .tolerance import assert_rounding_close
from .utils import (assert_clear_gradients, assert_padding_invariant,
                    random_readout)

TINY = dict(embed_dims=32, depths=(1, 1, 6, 1), num_heads=(1, 2, 4, 8))


def _stage(seed=0, **kwargs):
    torch.manual_seed(seed)
    model = STViTSwinTransformer(**TINY, stgm_index=1, global_centres=True,
                                 **kwargs)
    model.init_weights()
    model.eval()
    return model.stages[2]


def _region(a, k, real, placement, w=7):
    """[lo, hi) of window a's region along one axis, by hand."""
    start = a * w - (k - w) // 2
    if placement == 'inside':
        start = max(min(start, real - k), 0)
    return max(start, 0), min(start + k, real)


def _reference_s2(stage, x, valid, H, W, with_semantic):
    """Eq. 3 window by window, with the key sets built by hand."""
    w, s = 7, stage.semantic_window
    stgm1, stgm2 = stage.blocks[1], stage.blocks[2]
    k1, k2 = stage.key_windows
    placement = stage.key_region
    from mmvitaccel.ops import window_partition
    windows = window_partition(x, w)
    centres, sem_valid = stage._fixed_pooling(
        windows, valid=window_partition(valid, w))
    s1 = stage.attend_regions(stgm1, centres, stgm1.key_values(x), valid, w,
                              k1, placement=placement)
    nh, nw = x.shape[1] // w, x.shape[2] // w
    g = stage.global_centres[0]
    out = torch.empty_like(s1)
    for n in range(nh * nw):
        a, b = divmod(n, nw)
        (r0, r1), (c0, c1) = _region(a, k2, H, placement), \
            _region(b, k2, W, placement)
        keys = []
        if with_semantic:
            for m in range(nh * nw):
                p, q = divmod(m, nw)
                rows = (p * w, min(p * w + w, H))
                cols = (q * w, min(q * w + w, W))
                if r0 <= rows[0] and rows[1] <= r1 and \
                        c0 <= cols[0] and cols[1] <= c1:
                    keys.append(s1[m][sem_valid[m]])
        keys.append(x[0, r0:r1, c0:c1].reshape(-1, x.shape[-1]))
        keys = torch.cat(keys)
        out[n] = stgm2(s1[n:n + 1] + g, stgm2.key_values(keys)[None],
                       None, shortcut=s1[n:n + 1])[0]
    return out


@pytest.mark.parametrize('H,W,k2,placement', [(14, 14, 14, 'inside'),
                                              (17, 23, 14, 'inside'),
                                              (17, 23, 14, 'centred'),
                                              (30, 26, 21, 'centred')])
@pytest.mark.parametrize('share', [0., 2.])  # dense / gathered regions
def test_stgm2_is_eq3(H, W, k2, placement, share, monkeypatch):
    monkeypatch.setattr(semantic_swin_stage, 'DENSE_REGION_SHARE', share)
    stage = _stage(key_windows=(10, k2), key_region=placement).double()
    assert stage.stgm2_keys == 'semantic_and_image'
    x, valid = pad_to_multiple(
        torch.randn(1, H, W, 128, dtype=torch.double), 7)
    with torch.no_grad():
        _, s2, _ = stage.generate(0, stage.blocks[1], stage.blocks[2], x,
                                  valid)
        ref = _reference_s2(stage, x, valid, H, W, with_semantic=True)
        old = _reference_s2(stage, x, valid, H, W, with_semantic=False)
    # float64, window by window against batched: the STGM-2 block at C =
    # 128 (norms, q/kv, proj, fc1 of 128, fc2 512, d = 32) over <= 21 x 21
    # image keys and the S1 of <= 9 windows (twice): n < 3000
    assert_rounding_close(s2, ref, 3000)
    # S1 in the keys changes S2 (by ~1e-3 of its scale 4, measured 4e-3);
    # rounding would by ~1e-15 of it
    assert (s2 - old).abs().max() > 1e-3
    stage.stgm2_keys = 'image'
    with torch.no_grad():
        _, s2_image, _ = stage.generate(0, stage.blocks[1], stage.blocks[2],
                                        x, valid)
    assert_rounding_close(s2_image, old, 3000)


def test_image_keys_option_is_todays_code_path():
    """stgm2_keys='image' with key_region='centred' runs exactly the
    former STGM-2 (keys X of the centred region), bit for bit."""
    stage = _stage(stgm2_keys='image', key_region='centred')
    x, valid = pad_to_multiple(torch.randn(2, 17, 23, 128), 7)
    w, (k1, k2) = 7, stage.key_windows
    from mmvitaccel.ops import window_partition
    stgm1, stgm2 = stage.blocks[1], stage.blocks[2]
    with torch.no_grad():
        _, s2, _ = stage.generate(0, stgm1, stgm2, x, valid)
        centres, _ = stage._fixed_pooling(window_partition(x, w),
                                          valid=window_partition(valid, w))
        s1 = stage.attend_regions(stgm1, centres, stgm1.key_values(x), valid,
                                  w, k1)
        ref = stage.attend_regions(stgm2, s1 + stage.global_centres[0],
                                   stgm2.key_values(x), valid, w, k2,
                                   shortcut=s1)
    assert torch.equal(s2, ref)


@pytest.mark.parametrize('share', [0., 2.])
def test_gradients_reach_s1_through_the_keys(share, monkeypatch):
    """With S1 cut off from the queries and the residual, the gradient
    still reaches it: through the STGM-2 keys and values."""
    monkeypatch.setattr(semantic_swin_stage, 'DENSE_REGION_SHARE', share)
    stage = _stage(key_windows=(10, 21), key_region='centred')
    x, valid = pad_to_multiple(torch.randn(1, 30, 26, 128), 7)
    nh, nw, s = 5, 4, 3
    s1 = torch.randn(nh * nw, s * s, 128, requires_grad=True)
    stgm2 = stage.blocks[2]
    grid = window_reverse(stgm2.key_values(s1), s, nh * s, nw * s)
    grid_valid = torch.ones(nh * s, nw * s, dtype=torch.bool)
    out = stage.attend_regions(stgm2, s1.detach(), stgm2.key_values(x),
                               valid, 7, 21, shortcut=s1.detach(),
                               semantic=(grid, grid_valid))
    random_readout(out).backward()
    # every S1 gets a real gradient (tests/utils.py GRAD_FLOOR: above
    # rounding noise, ~1e-6 here)
    assert s1.grad.abs().amax(-1).min() > 1e-4


BACKBONES = {
    'stvit': (STViTSwinTransformer, semantic_swin_stage,
              dict(**TINY, stgm_index=1, out_indices=(2, 3)), (150, 100)),
    'stvit_r': (STViTRSwinTransformer, dumbbell_swin_stage, dict(**TINY),
                (150, 100)),
    'video': (STViTSwinTransformer3D, semantic_swin_stage,
              dict(arch=dict(embed_dims=32, depths=(1, 1, 4, 1),
                             num_heads=(1, 2, 4, 8)),
                   stgm_index=1, window_size=(2, 7, 7)), (150, 100)),
}


def _build(name, **kwargs):
    cls, _, args, _ = BACKBONES[name]
    torch.manual_seed(0)
    model = cls(**args, global_centres=True, **kwargs)
    model.init_weights()
    return model


def _input(name, size):
    return torch.randn(1, 3, 4, *size) if name == 'video' else \
        torch.randn(1, 3, *size)


@pytest.mark.parametrize('name', sorted(BACKBONES))
def test_default_is_eq3_and_differs_from_image_keys(name):
    """All three Swin backbones default to Concat(S1, X), and it changes
    their outputs against the former X-only keys."""
    default, image = _build(name), _build(name, stgm2_keys='image')
    image.load_state_dict(default.state_dict())
    default.eval()  # mmdet's Swin.train() returns None: no chaining
    image.eval()
    x = _input(name, (224, 224))
    with torch.no_grad():
        a, b = default(x), image(x)
    a = a if isinstance(a, tuple) else (a, )
    b = b if isinstance(b, tuple) else (b, )
    # ~1e-3 of outputs of scale ~4 (measured 5e-3 to 2e-2); float32
    # rounding of these would be ~1e-6 of it
    assert (a[-1] - b[-1]).abs().max() > 1e-4


@pytest.mark.parametrize('name', sorted(BACKBONES))
@pytest.mark.parametrize('key_region', ['inside', 'centred'])
def test_padding_invariance_with_s1_keys(name, key_region, monkeypatch):
    cls, module, _, size = BACKBONES[name]
    model = _build(name, key_region=key_region)
    x = _input(name, size)
    if name == 'video':  # a single tensor: compare it whole
        model.eval()
        with torch.no_grad():
            clean = model(x)
        pad = module.pad_to_multiple

        def noisy_pad(t, multiple):
            padded, valid = pad(t, multiple)
            padded = padded.clone()
            padded[:, ~valid] = 10 * torch.randn_like(padded[:, ~valid])
            return padded, valid

        monkeypatch.setattr(module, 'pad_to_multiple', noisy_pad)
        with torch.no_grad():  # bit-exact, as assert_padding_invariant
            torch.testing.assert_close(model(x), clean, rtol=0, atol=0)
        return
    assert_padding_invariant(model, x, module, monkeypatch,
                             first=2 if name == 'stvit_r' else 0)


@pytest.mark.parametrize('name', sorted(BACKBONES))
def test_gradients_reach_every_stgm_parameter(name):
    model = _build(name, pooling='intra_inter', drop_path_rate=0.)
    model.train()
    random_readout(model(_input(name, (64, 96)))).backward()
    stage = model.layers[2] if name == 'video' else model.stages[2]
    assert_clear_gradients(
        (n, p) for n, p in stage.named_parameters()
        if not n.endswith('inter_mix'))  # zero until the projection moves


@pytest.mark.parametrize('name', sorted(BACKBONES))
@pytest.mark.parametrize('kwargs,match', [
    (dict(stgm2_keys='semantic'), "stgm2_keys 'semantic'"),
    (dict(key_region='center'), "key_region 'center'"),
])
def test_bad_options_fail_at_build(name, kwargs, match):
    with pytest.raises(ValueError, match=match):
        _build(name, **kwargs)


def test_defaults_follow_the_source_of_their_key_windows():
    """10 and 14 come from the classification code (regions inside the
    map); STViT-R's 14 and 21 from the detection code (centred)."""
    assert _build('stvit').stages[2].key_region == 'inside'
    assert _build('video').layers[2].key_region == 'inside'
    r = _build('stvit_r')
    assert r.stages[2].key_region == 'centred'
    assert r.stages[2].key_windows == (14, 21)
