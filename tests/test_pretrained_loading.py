"""One pretrained loading (PretrainedMixin), one DGSSA host conversion, one
Swin arch table and base, and Video Swin inflation through upstream."""
import hashlib

import pytest
import torch
from mmdet.models.backbones.swin import SwinTransformer as DetSwin
from mmpretrain.models.backbones import SwinTransformer as PreSwin
from mmpretrain.models.backbones import VisionTransformer

import mmvitaccel.models as B  # before mmaction
from mmaction.models.backbones.swin import SwinTransformer3D  # noqa: I100
from mmvitaccel.models.dgssa import dgssa_swin, dgssa_vit, static_checkpoint
from mmvitaccel.models.stvit import stvit_r_swin, stvit_swin
from mmvitaccel.models.utils import (SWIN_ARCHS, PretrainedMixin, SwinBase,
                                     pretrained)

STVIT_SWIN = dict(embed_dims=32, depths=(1, 1, 6, 1), num_heads=(1, 2, 4, 8))
DEIT = dict(embed_dims=64, num_layers=8, num_heads=4, feedforward_channels=128)
DGSSA_SWIN = dict(embed_dims=32, depths=(2, 2, 2, 1), num_heads=(1, 2, 4, 8))
VIDEO = dict(arch=dict(embed_dims=32, depths=[1, 1, 4, 1],
                       num_heads=[1, 2, 4, 8]),
             pretrained2d=False, window_size=(2, 7, 7))
HVIT_SWIN = dict(embed_dims=32, depths=[2, 2, 2, 2], num_heads=[2, 2, 4, 8])
HVIT_DEIT = dict(embed_dims=64, num_layers=2, num_heads=4,
                 feedforward_channels=128)

#: name: (ours, its upstream host) as the backbones' own tests build them
CASES = {
    'stvit_swin': (lambda **kw: B.STViTSwinTransformer(
        **STVIT_SWIN, stgm_index=2, pooling='intra_inter',
        global_centres=True, **kw), lambda: DetSwin(**STVIT_SWIN)),
    'stvit_r_swin': (lambda **kw: B.STViTRSwinTransformer(**STVIT_SWIN, **kw),
                     lambda: DetSwin(**STVIT_SWIN)),
    'stvit_deit': (lambda **kw: B.STViTDeiT(
        arch=DEIT, img_size=64, patch_size=16, stgm_layers=(3, 4), **kw),
                   lambda: VisionTransformer(arch=DEIT, img_size=96,
                                             patch_size=16)),
    'dgssa_vit': (lambda **kw: B.DGSSAVisionTransformer(
        arch=DEIT, img_size=64, patch_size=16, static_init='random',
        glad_tokens=(13, 9, 5), **kw),
                  lambda: VisionTransformer(arch=DEIT, img_size=64,
                                            patch_size=16)),
    'dgssa_swin': (lambda **kw: B.DGSSASwinTransformer(
        **DGSSA_SWIN, static_blocks=3, static_init='random', static_start=0,
        **kw),
                   lambda: DetSwin(**DGSSA_SWIN)),
    'stvit_swin3d': (lambda **kw: B.STViTSwinTransformer3D(
        **VIDEO, stgm_index=1, pooling='intra_inter', global_centres=True,
        **kw), lambda: SwinTransformer3D(**VIDEO)),
    'hvit_swin': (lambda **kw: B.HViTSwinTransformer(
        arch=HVIT_SWIN, window_size=4, **kw),
                  lambda: PreSwin(arch=HVIT_SWIN, window_size=4)),
    'hvit_deit': (lambda **kw: B.HViTDeiT(
        arch=HVIT_DEIT, img_size=32, patch_size=16, **kw),
                  lambda: VisionTransformer(arch=HVIT_DEIT, img_size=32,
                                            patch_size=16)),
}

#: the report of each case as the six copies of ``init_weights`` gave it
#: before they became the mixin (key counts, and a digest of the sorted
#: keys of every field): the mixin must give the same. STViT's digests were
#: updated when the learnable pooling's keys changed (intra.bias gone,
#: inter_mix new).
REPORTS = {
    'stvit_swin': ('loaded 128 new 7 missing 0 unused 19 mismatched 0',
                   'c1ccbdf4e324'),
    'stvit_r_swin': ('loaded 137 new 0 missing 0 unused 10 mismatched 0',
                     '0668584e3c4c'),
    'stvit_deit': ('loaded 102 new 7 missing 0 unused 0 mismatched 0',
                   '966d99b9a4e0'),
    'dgssa_vit': ('loaded 102 new 14 missing 0 unused 0 mismatched 0 '
                  'dropped 4', 'f3b155325fbf'),
    'dgssa_swin': ('loaded 113 new 3 missing 0 unused 0 mismatched 0 '
                   'dropped 9', '56ff30e9c398'),
    'stvit_swin3d': ('loaded 102 new 7 missing 0 unused 11 mismatched 0',
                     '74025004c04b'),
    'hvit_swin': ('loaded 143 new 208 missing 0 unused 16 mismatched 0',
                  '265047e362c5'),
    'hvit_deit': ('loaded 34 new 52 missing 0 unused 4 mismatched 0',
                  '68687af53f8e'),
}


def _fingerprint(report):
    counts = ' '.join(f'{k} {len(v)}' for k, v in report.items())
    digest = hashlib.sha1('\n'.join(
        f'{k}:{x}' for k in report for x in sorted(report[k])).encode())
    return counts, digest.hexdigest()[:12]


def _checkpoint(tmp_path, host, prefix='backbone.'):
    torch.manual_seed(1)
    with torch.no_grad():
        for p in host.parameters():
            p.add_(0.1 * torch.randn_like(p))
    path = str(tmp_path / 'host.pth')
    torch.save(dict(state_dict={prefix + k: v
                                for k, v in host.state_dict().items()}), path)
    return path


@pytest.mark.parametrize('name', sorted(CASES))
def test_pretrained_loading_goes_through_the_mixin(name, tmp_path,
                                                   monkeypatch):
    ours_fn, host_fn = CASES[name]
    torch.manual_seed(0)
    path = _checkpoint(tmp_path, host_fn())
    ours = ours_fn(init_cfg=dict(type='Pretrained', checkpoint=path))
    assert isinstance(ours, PretrainedMixin)
    calls = []
    load = pretrained.load_with_report

    def spy(*args, **kwargs):
        calls.append(args[0])
        return load(*args, **kwargs)

    monkeypatch.setattr(pretrained, 'load_with_report', spy)
    ours.init_weights()
    assert calls == [ours]
    assert _fingerprint(ours.load_report) == REPORTS[name]
    up = _checkpoint_state(path)
    for key, value in ours.state_dict().items():  # (pos_embed is resized)
        if key in ours.load_report['loaded'] and key in up and \
                up[key].shape == value.shape:
            assert torch.equal(value, up[key]), key


def _checkpoint_state(path):
    state = torch.load(path)['state_dict']
    return {k[len('backbone.'):]: v for k, v in state.items()}


@pytest.mark.parametrize('name', ['dgssa_vit', 'dgssa_swin'])
def test_both_dgssa_backbones_convert_with_the_one_function(
        name, tmp_path, monkeypatch):
    ours_fn, host_fn = CASES[name]
    path = _checkpoint(tmp_path, host_fn())
    calls = []
    convert = static_checkpoint.static_attention_state_dict

    def spy(*args, **kwargs):
        calls.append(kwargs.get('window'))
        return convert(*args, **kwargs)

    monkeypatch.setattr(dgssa_vit, 'static_attention_state_dict', spy)
    monkeypatch.setattr(dgssa_swin, 'static_attention_state_dict', spy)
    ours = ours_fn(init_cfg=dict(type='Pretrained', checkpoint=path))
    ours.init_weights()
    # Swin folds the relative position bias of its 7x7 windows, ViT has none
    assert calls == [7 if name == 'dgssa_swin' else None]
    assert ours.load_report['dropped']


def test_static_attention_conversion_folds_the_bias_of_a_swin_window():
    host = DetSwin(**DGSSA_SWIN)
    ours = B.DGSSASwinTransformer(**DGSSA_SWIN, static_blocks=1,
                                  static_start=0, static_init='uniform')
    msa = host.stages[0].blocks[0].attn.w_msa
    state, notes, fresh = static_checkpoint.static_attention_state_dict(
        host.state_dict(),
        {'stages.0.blocks.0.attn.w_msa.': ours.stages[0].blocks[0].attn.w_msa},
        'uniform', window=7)
    p = 'stages.0.blocks.0.attn.w_msa.'
    assert torch.equal(state[p + 'v.weight'], msa.qkv.weight[64:])
    assert p + 'relative_position_bias_table' not in state
    bias = msa.relative_position_bias_table[
        msa.relative_position_index.view(-1)].view(49, 49, -1).permute(2, 0, 1)
    # bit-exact: the folded bias is a gather of the same table entries
    torch.testing.assert_close(fresh[p + 'static_logits'], bias, rtol=0,
                               atol=0)
    assert notes == [f'{p}qkv.weight: Q and K dropped',
                     f'{p}qkv.bias: Q and K dropped',
                     f'{p}relative_position_bias_table: folded into the '
                     f'static logits']
    with pytest.raises(ValueError, match='tools/dgssa_init.py'):
        static_checkpoint.static_attention_state_dict(
            host.state_dict(), {p: ours.stages[0].blocks[0].attn.w_msa},
            'dg', window=7)


def test_one_swin_arch_table_and_base():
    # HViT-Swin builds mmpretrain's Swin by the same names and sizes
    for arch, sizes in SWIN_ARCHS.items():
        zoo = PreSwin.arch_zoo[arch]
        assert (zoo['embed_dims'], tuple(zoo['depths']),
                tuple(zoo['num_heads'])) == (sizes['embed_dims'],
                                             sizes['depths'],
                                             sizes['num_heads'])
    for cls in (B.STViTSwinTransformer, B.STViTRSwinTransformer,
                B.DGSSASwinTransformer):
        assert issubclass(cls, SwinBase) and issubclass(cls, DetSwin)
    assert issubclass(B.HViTSwinTransformer, PreSwin)
    for module in (stvit_swin, dgssa_swin, stvit_r_swin):
        assert not hasattr(module, 'SWIN_ARCHS')
    with pytest.raises(ValueError, match="unknown arch 'huge'"):
        B.DGSSASwinTransformer(arch='huge', static_blocks=0)
