"""Bad settings and inputs get a clear error naming the parameter (at build
time where the setting alone decides), and odd inputs work where upstream
works: the gaps of a hostile review (issue 12)."""
import importlib.util
import os.path as osp
import pickle

import pytest
import torch
from mmengine.config import Config

import mmvitaccel  # noqa: F401
from mmvitaccel.models import (DGSSASwinTransformer, DGSSAVisionTransformer,
                               HViTDeiT, HViTPyramidVisionTransformerV2,
                               HViTSwinTransformer, STViTDeiT,
                               STViTRSwinTransformer, STViTSwinTransformer,
                               STViTSwinTransformer3D,
                               TokenPrunedVisionTransformer)

from .utils import REPO, TINY_MODELS

SWIN = dict(embed_dims=32, depths=(1, 1, 6, 1), num_heads=(1, 2, 4, 8))
SWIN3D = dict(arch=dict(embed_dims=32, depths=[1, 1, 4, 1],
                        num_heads=[1, 2, 4, 8]),
              pretrained2d=False, window_size=(2, 7, 7), stgm_index=1)
VIT = dict(embed_dims=64, num_layers=8, num_heads=2, feedforward_channels=128)
HVIT_SWIN = dict(embed_dims=16, depths=[2, 2, 2, 2], num_heads=[2, 4, 8, 16])

#: the STViT Swins, each with its own valid settings
STVIT_SWINS = {
    'stvit': lambda **kw: STViTSwinTransformer(**SWIN, stgm_index=2, **kw),
    'stvit_r': lambda **kw: STViTRSwinTransformer(**SWIN, **kw),
    'stvit_3d': lambda **kw: STViTSwinTransformer3D(**SWIN3D, **kw),
}


# --- STViT: semantic_window and key_windows ---------------------------------


@pytest.mark.parametrize('name', sorted(STVIT_SWINS))
@pytest.mark.parametrize('semantic_window', [2.5, 3.0, '3', True])
def test_non_int_semantic_window_is_refused_at_build(name, semantic_window):
    with pytest.raises(TypeError, match=r'semantic_window must be an int in '
                       r'1\.\.7'):
        STVIT_SWINS[name](semantic_window=semantic_window)


@pytest.mark.parametrize('name', sorted(STVIT_SWINS))
def test_semantic_window_need_not_divide_the_window(name):
    # adaptive bins: 7 -> 2 and 7 -> 5 are as valid as 7 -> 3
    model = STVIT_SWINS[name](semantic_window=5)
    model.eval()
    x = torch.randn(1, 3, 2, 64, 64) if name == 'stvit_3d' else \
        torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        out = model(x)
    out = out if isinstance(out, tuple) else (out, )
    assert all(torch.isfinite(o).all() for o in out)


@pytest.mark.parametrize('name', sorted(STVIT_SWINS))
@pytest.mark.parametrize('key_windows', [14, '14', (10.0, 14), None])
def test_key_windows_not_a_pair_of_ints_is_refused(name, key_windows):
    with pytest.raises(TypeError,
                       match=r'key_windows must be a pair of ints >= 7'):
        STVIT_SWINS[name](key_windows=key_windows)


@pytest.mark.parametrize('name', sorted(STVIT_SWINS))
def test_decreasing_key_windows_are_refused(name):
    with pytest.raises(ValueError, match=r'key_windows must not decrease.*'
                       r'got \(21, 14\)'):
        STVIT_SWINS[name](key_windows=(21, 14))
    STVIT_SWINS[name](key_windows=(14, 14))  # equal is fine


def test_recovery_window_must_be_an_int():
    with pytest.raises(TypeError, match='recovery_window must be an int'):
        STVIT_SWINS['stvit_r'](recovery_window=27.5)
    with pytest.raises(ValueError, match='recovery_window must be an int in '
                       r'3\.\.'):
        STVIT_SWINS['stvit_r'](recovery_window=2)


# --- token pruning: prune_before and thresholds -----------------------------


def _pruned(**kwargs):
    return TokenPrunedVisionTransformer(arch=VIT, img_size=32, patch_size=8,
                                        **kwargs)


def test_an_int_prune_before_is_one_location():
    torch.manual_seed(0)
    one = _pruned(prune_before=3, selector='threshold', thresholds=0.01)
    torch.manual_seed(0)
    ref = _pruned(prune_before=(3, ), selector='threshold',
                  thresholds=(0.01, ))
    assert one.prune_before == (3, )
    assert torch.equal(one.thresholds, ref.thresholds)
    with pytest.raises(TypeError, match='prune_before must be an int or a '
                       'list/tuple of ints'):
        _pruned(prune_before='3')


@pytest.mark.parametrize('bad', [float('nan'), float('inf'), -float('inf')])
def test_non_finite_thresholds_are_refused_at_build(bad):
    with pytest.raises(ValueError, match='thresholds must be finite'):
        _pruned(prune_before=(2, 4), selector='threshold',
                thresholds=(0.001, bad))


def test_non_finite_thresholds_are_refused_when_loaded():
    model = _pruned(prune_before=(2, 4), selector='threshold',
                    thresholds=(0.001, 0.002))
    state = model.state_dict()
    state['thresholds'] = torch.tensor([0.001, float('nan')])
    with pytest.raises(ValueError, match='thresholds.*must be finite'):
        model.load_state_dict(state)
    # nothing was loaded: the model still prunes as it did
    assert torch.equal(model.thresholds, torch.tensor([0.001, 0.002]))
    # the same inside a whole-model state dict (prefixed keys)
    wrapper = torch.nn.Module()
    wrapper.backbone = model
    with pytest.raises(ValueError, match="'backbone.thresholds'"):
        wrapper.load_state_dict(
            {f'backbone.{k}': v for k, v in state.items()})


# --- HViT: input sizes ------------------------------------------------------


def _same_weights(ours, upstream):
    missing, unused = ours.load_state_dict(upstream.state_dict(),
                                           strict=False)
    assert not unused
    for module in (ours, upstream):
        module.eval()


def test_hvit_swin_takes_maps_smaller_than_a_window_as_upstream_pads():
    from mmpretrain.models import SwinTransformer
    kwargs = dict(arch=HVIT_SWIN, out_indices=(0, 1, 2, 3))
    torch.manual_seed(0)
    # plain (no hMHSA/cFFN): it must equal upstream wherever upstream works
    ours = HViTSwinTransformer(**kwargs, hmhsa=False, cffn=False)
    padded = SwinTransformer(**kwargs, pad_small_map=True)
    default = SwinTransformer(**kwargs)
    _same_weights(ours, padded)
    _same_weights(default, padded)
    with torch.no_grad():
        # 64 px: stage maps 16, 8, 4, 2 (< 7 from stage 3 on): upstream's
        # default refuses them, pad_small_map=True pads them
        x = torch.randn(1, 3, 64, 64)
        with pytest.raises(AssertionError, match='pad_small_map'):
            default(x)
        for out, ref in zip(ours(x), padded(x)):  # the same modules
            torch.testing.assert_close(out, ref, rtol=0, atol=0)
        # 224 px: a 7x7 stage-4 map is not shifted, as upstream's default
        x = torch.randn(1, 3, 224, 224)
        for out, ref in zip(ours(x), default(x)):
            torch.testing.assert_close(out, ref, rtol=0, atol=0)
    # and with hMHSA/cFFN, any size runs
    hvit = HViTSwinTransformer(**kwargs)
    hvit.eval()
    with torch.no_grad():
        outs = hvit(torch.randn(2, 3, 33, 45))
    assert [tuple(o.shape[-2:]) for o in outs] == [(9, 12), (5, 6), (3, 3),
                                                   (2, 2)]
    assert all(torch.isfinite(o).all() for o in outs)


def test_hvit_pvtv2_too_small_input_is_refused_where_upstream_fails():
    from mmdet.models.backbones.pvt import PyramidVisionTransformerV2
    kwargs = dict(embed_dims=16, num_layers=[1, 1, 1, 1],
                  num_heads=[1, 2, 4, 8])
    ours = HViTPyramidVisionTransformerV2(arch='b0', **kwargs)
    upstream = PyramidVisionTransformerV2(**kwargs)
    ours.eval()
    upstream.eval()
    # stage 1 is H / 4 a side and its reduction conv needs 8 (sr_ratio)
    with torch.no_grad():
        for size in [(16, 16), (28, 64)]:
            x = torch.randn(1, 3, *size)
            with pytest.raises(RuntimeError, match='Kernel size'):
                upstream(x)
            with pytest.raises(ValueError, match=r'smaller than its sr_ratio '
                               r'8.*at least 29 px'):
                ours(x)
        for size in [(29, 29), (29, 40)]:
            x = torch.randn(1, 3, *size)
            assert [o.shape for o in ours(x)] == \
                [o.shape for o in upstream(x)]
    assert ours.min_input_size() == 29


# --- every backbone: input channels ------------------------------------------

#: name -> (tiny backbone, input shape with one channel)
BACKBONES = {
    'stvit_swin': (lambda: STViTSwinTransformer(**SWIN, stgm_index=2),
                   (1, 1, 64, 64)),
    'stvit_r_swin': (lambda: STViTRSwinTransformer(**SWIN), (1, 1, 64, 64)),
    'stvit_swin3d': (lambda: STViTSwinTransformer3D(**SWIN3D),
                     (1, 1, 2, 32, 32)),
    'stvit_deit': (lambda: STViTDeiT(arch=VIT, img_size=64, patch_size=16),
                   (1, 1, 64, 64)),
    'token_pruned_vit': (_pruned, (1, 1, 32, 32)),
    'dgssa_vit': (lambda: DGSSAVisionTransformer(
        arch=VIT, img_size=64, patch_size=16, static_layers=(1, 2),
        glad_layers=(3, 5, 7), glad_tokens=(13, 9, 5)), (1, 1, 64, 64)),
    'dgssa_swin': (lambda: DGSSASwinTransformer(
        embed_dims=32, depths=(2, 2, 2, 1), num_heads=(1, 2, 4, 8),
        static_blocks=3), (1, 1, 64, 64)),
    'hvit_deit': (lambda: HViTDeiT(arch=VIT, img_size=64), (1, 1, 64, 64)),
    'hvit_swin': (lambda: HViTSwinTransformer(arch=HVIT_SWIN),
                  (1, 1, 64, 64)),
    'hvit_pvtv2': (lambda: HViTPyramidVisionTransformerV2(
        arch='b0', embed_dims=16, num_layers=[1, 1, 1, 1],
        num_heads=[1, 2, 4, 8]), (1, 1, 64, 64)),
}


@pytest.mark.parametrize('name', sorted(BACKBONES))
def test_wrong_input_channels_name_in_channels(name):
    build, shape = BACKBONES[name]
    model = build()
    model.eval()
    with torch.no_grad(), pytest.raises(
            ValueError, match=r'built with in_channels=3 .*got shape '
            r'\(1, 1,.*build it with in_channels=1'):
        model(torch.randn(*shape))


# --- tools/reparameterize.py: one safe load ----------------------------------


def _tool(name, path):
    spec = importlib.util.spec_from_file_location(name, osp.join(REPO, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _hvit_deit_config(tmp_path):
    config = 'configs/hvit_deit_s_in1k.py'
    cfg = Config.fromfile(osp.join(REPO, config))
    cfg.merge_from_dict({
        k: v
        for k, v in TINY_MODELS[config].items() if not k.startswith('tiny.')
    })
    path = str(tmp_path / 'hvit_deit.py')
    cfg.dump(path)
    return path


def _trained_checkpoint(config, path, **meta):
    """A checkpoint of the model of ``config`` at ``path``."""
    from mmengine.registry import MODELS, DefaultScope, init_default_scope
    cfg = Config.fromfile(config)
    init_default_scope('mmpretrain')
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(cfg.model)
    model.init_weights()
    torch.save(dict(state_dict=model.state_dict(), meta=meta), path)
    return path


def _leave_marker(path):
    """What a malicious checkpoint would run when unpickled."""
    with open(path, 'w') as f:
        f.write('ran')
    return 0


class _RunsCodeWhenUnpickled:

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return _leave_marker, (self.marker, )


def test_reparameterize_reads_the_checkpoint_once_and_safely(
        tmp_path, monkeypatch):
    config = _hvit_deit_config(tmp_path)
    ckpt = _trained_checkpoint(config, str(tmp_path / 'epoch_1.pth'),
                               epoch=1)
    calls = []
    load = torch.load

    def spy(*args, **kwargs):
        calls.append(kwargs.get('weights_only'))
        return load(*args, **kwargs)

    monkeypatch.setattr(torch, 'load', spy)
    out = str(tmp_path / 'deploy.pth')
    _tool('reparameterize', 'tools/reparameterize.py').main(
        [config, ckpt, out, '--check-shape', '1', '3', '64', '64'])
    monkeypatch.undo()
    # read once, safely: weights_only where torch can allow-list mmengine's
    # classes (>= 2.6), else through mmvitaccel.compat's restricted
    # unpickler (weights_only=False with that pickle_module)
    from mmvitaccel.compat import renamed_safe_globals_supported
    assert calls == [renamed_safe_globals_supported()]
    meta = torch.load(out)['meta']
    assert meta['epoch'] == 1 and meta['deploy'] is True


def test_reparameterize_refuses_a_checkpoint_that_runs_code(tmp_path):
    config = _hvit_deit_config(tmp_path)
    ckpt = str(tmp_path / 'epoch_1.pth')
    _trained_checkpoint(config, ckpt)
    marker = str(tmp_path / 'marker')
    state = torch.load(ckpt)
    state['meta'] = dict(epoch=1, payload=_RunsCodeWhenUnpickled(marker))
    torch.save(state, ckpt)
    with pytest.raises(pickle.UnpicklingError, match='_leave_marker'):
        _tool('reparameterize', 'tools/reparameterize.py').main(
            [config, ckpt, str(tmp_path / 'deploy.pth')])
    assert not osp.exists(marker)
    assert not osp.exists(tmp_path / 'deploy.pth')


def test_building_a_model_leaves_its_config_as_it_was():
    """apis.harness.build_model builds from copies: mmpretrain's
    ImageClassifier fills in its data preprocessor's type in place, which
    changed the config's text (a study cache key) before."""
    from mmvitaccel.apis.harness import build_model, load_config
    cfg = load_config(osp.join(REPO, 'configs/study/dense/swin_host.py'))
    before = cfg.pretty_text
    assert 'type' not in cfg.data_preprocessor
    build_model(cfg)
    assert cfg.pretty_text == before
