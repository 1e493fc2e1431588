"""STViT-R-Swin backbone: parity, any input size, padding, weights, FLOPs."""
import pytest
import torch
from mmdet.models.backbones import SwinTransformer
from mmengine.config import ConfigDict

import mmvitaccel  # noqa: F401
from mmvitaccel.models import STViTRSwinTransformer
from mmvitaccel.analysis.flops import count_flops
from mmvitaccel.models.stvit import dumbbell_swin_stage
from mmvitaccel.models.stvit import semantic_swin_stage
from mmvitaccel.models.utils import SWIN_ARCHS

from .tolerance import assert_rounding_close
from .utils import (assert_clear_gradients, assert_padding_invariant,
                    random_readout)

TINY = dict(embed_dims=32, depths=(1, 1, 6, 1), num_heads=(1, 2, 4, 8))


def _pair(**kwargs):
    torch.manual_seed(0)
    swin = SwinTransformer(**TINY)
    swin.init_weights()
    ours = STViTRSwinTransformer(**TINY, **kwargs)
    ours.init_weights()
    ours.load_state_dict(swin.state_dict(), strict=False)
    swin.eval()
    ours.eval()
    return swin, ours


def test_no_units_equals_upstream_swin():
    swin, ours = _pair(num_units=0)
    assert ours.state_dict().keys() == swin.state_dict().keys()
    x = torch.randn(1, 3, 100, 150)
    with torch.no_grad():
        for a, b in zip(ours(x), swin(x)):
            assert torch.equal(a, b)


@pytest.mark.parametrize('size', [(224, 224), (225, 313), (97, 161)])
def test_any_input_size(size):
    _, ours = _pair()
    with torch.no_grad():
        outs = ours(torch.randn(2, 3, *size))
    swin = SwinTransformer(**TINY)
    swin.eval()  # mmdet's Swin.train() returns None: no chaining
    with torch.no_grad():
        swin_shapes = [o.shape for o in swin(torch.randn(2, 3, *size))]
    assert [o.shape for o in outs] == swin_shapes
    assert all(torch.isfinite(o).all() for o in outs)


# 0: every region attends densely under a mask; 2: every region is gathered
@pytest.mark.parametrize('share', [0., 2.])
@pytest.mark.parametrize('pooling', ['max', 'avg', 'intra_inter'])
def test_outputs_do_not_depend_on_padding(pooling, share, monkeypatch):
    """Fill the stage's internal padding with noise: nothing changes."""
    monkeypatch.setattr(semantic_swin_stage, 'DENSE_REGION_SHARE', share)
    _, ours = _pair(pooling=pooling, global_centres=True)
    if pooling == 'intra_inter':
        for pooler in ours.stages[2].poolers:
            for p in pooler.parameters():
                torch.nn.init.normal_(p)
    x = torch.randn(1, 3, 150, 100)  # stage 3: 10x7 -> padded to 14x7
    assert_padding_invariant(ours, x, dumbbell_swin_stage, monkeypatch)


@pytest.mark.parametrize('size', [(150, 100), (320, 448)])
def test_dense_and_gathered_regions_agree(size, monkeypatch):
    """The two exact forms of region attention give the same outputs, with
    and without padding (at 320x448 the STGM-1 regions are gathered and the
    recovery is dense under the default share)."""
    _, ours = _pair()
    ours.double()
    x = torch.randn(1, 3, *size, dtype=torch.double)
    outs = {}
    for share in (0., 2., semantic_swin_stage.DENSE_REGION_SHARE):
        monkeypatch.setattr(semantic_swin_stage, 'DENSE_REGION_SHARE', share)
        with torch.no_grad():
            outs[share] = ours(x)
    # float64, the region sums in another layout: the chain through 9
    # blocks of width C = 32..256 (~7 C each, 49-key windows), the patch
    # merges and the region attention (<= 27 x 27 keys, twice, in <= 4
    # layers): ~16000 terms, n = 2e4
    for form in outs.values():
        for a, b in zip(form, outs[0.]):
            assert_rounding_close(a, b, 20_000)


def test_gradients_reach_new_and_replaced_parameters():
    ours = STViTRSwinTransformer(
        **TINY, pooling='intra_inter', global_centres=True,
        drop_path_rate=0.)  # a dropped branch would get no gradient
    ours.init_weights()
    ours.train()
    random_readout(ours(torch.randn(2, 3, 64, 96))).backward()
    # the pooling's grid mixing multiplies a projection that starts at
    # zero: its gradient is zero until that projection has moved (the
    # pooling's own test checks it once it has; f_intra has no bias now)
    assert_clear_gradients(
        (name, p) for name, p in ours.stages[2].named_parameters()
        if not name.endswith('inter_mix'))


def _official_layout(mmdet_state):
    """mmdet Swin names -> the microsoft release's names (random values)."""
    out = {}
    for k, v in mmdet_state.items():
        k = k.replace('stages.', 'layers.').replace('attn.w_msa.', 'attn.')
        k = k.replace('ffn.layers.0.0.', 'mlp.fc1.').replace(
            'ffn.layers.1.', 'mlp.fc2.')
        k = k.replace('patch_embed.projection', 'patch_embed.proj')
        if not k.startswith('norm'):
            out[k] = torch.randn_like(v.float()).to(v.dtype) \
                if v.is_floating_point() else v
    out['head.weight'] = torch.randn(10, 256)
    return dict(model=out)


def test_loads_official_swin_like_mmdet_does(tmp_path):
    ckpt = tmp_path / 'swin_official.pth'
    torch.save(_official_layout(SwinTransformer(**TINY).state_dict()), ckpt)
    init_cfg = ConfigDict(type='Pretrained', checkpoint=str(ckpt))
    ref = SwinTransformer(**TINY, convert_weights=True, init_cfg=init_cfg)
    ref.init_weights()
    ours = STViTRSwinTransformer(**TINY, pooling='intra_inter',
                                 init_cfg=init_cfg)
    ours.init_weights()
    ref_state, report = ref.state_dict(), ours.load_report
    for key, value in ours.state_dict().items():
        if key in ref_state:
            assert torch.equal(value, ref_state[key]), key
    # the replaced blocks' position tables are the only unused weights
    assert sorted(report['unused']) == sorted(
        f'stages.2.blocks.{i}.attn.w_msa.relative_position_{kind}'
        for i in range(1, 6) for kind in ('bias_table', 'index'))
    assert report['new'] and all('poolers' in k for k in report['new'])
    assert report['mismatched'] == []
    assert all(k.startswith('norm') for k in report['missing'])


def test_loads_mmdet_detector_checkpoint(tmp_path):
    swin = SwinTransformer(**TINY)
    state = {f'backbone.{k}': v for k, v in swin.state_dict().items()}
    state['neck.lateral_convs.0.conv.weight'] = torch.zeros(1)
    torch.save(dict(state_dict=state, meta=dict(epoch=36)),
               tmp_path / 'det.pth')
    ours = STViTRSwinTransformer(
        **TINY,
        init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'det.pth')))
    ours.init_weights()
    assert ours.load_report['missing'] == []
    for key, value in ours.state_dict().items():
        assert torch.equal(value, swin.state_dict()[key]), key


@pytest.mark.parametrize('kwargs,match', [
    (dict(depths=(1, 1, 4, 1)), 'room for at most 0'),
    (dict(num_units=2), 'room for at most 1'),
    (dict(pooling='median'), 'unknown pooling'),
    (dict(key_windows=(5, 21)), 'key_windows'),
    (dict(semantic_window=8), 'semantic_window'),
    (dict(arch='huge'), 'unknown arch'),
])
def test_bad_configs_fail_at_build(kwargs, match):
    args = dict(TINY, **kwargs)
    with pytest.raises(ValueError, match=match):
        STViTRSwinTransformer(**args)


@pytest.mark.parametrize('arch', ['small', 'base'])
def test_full_size_cuts_flops(arch):
    """Full-size STViT-R-Swin-S/B at 224: fewer FLOPs, Swin's pyramid."""
    ours = STViTRSwinTransformer(arch=arch)
    swin = SwinTransformer(**SWIN_ARCHS[arch])
    x = torch.randn(1, 3, 224, 224)
    ours.eval()
    swin.eval()
    with torch.no_grad():
        shapes = [o.shape for o in ours(x)]
        assert shapes == [o.shape for o in swin(x)]
    assert len(ours.stages[2].blocks) == 18 and ours.stages[2].num_units == 3
    assert count_flops(ours, x).total < count_flops(swin, x).total
