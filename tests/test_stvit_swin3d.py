"""STViT on Video Swin: layout, sizes, padding, weights, inflation, FLOPs."""
import math

import pytest
import torch

from mmvitaccel.models import STViTSwinTransformer3D  # before mmaction
from mmaction.models.backbones.swin import SwinTransformer3D  # noqa: E402,I100
from mmvitaccel.models.backbones import stvit_swin3d
from mmvitaccel.analysis.flops import count_flops

from .utils import assert_padding_invariant

TINY = dict(embed_dims=32, depths=[1, 1, 4, 1], num_heads=[1, 2, 4, 8])
ARGS = dict(arch=TINY, pretrained2d=False, window_size=(2, 7, 7))


def _pair(**kwargs):
    """Video Swin and STViT with the same weights, in eval mode."""
    torch.manual_seed(0)
    swin = SwinTransformer3D(**ARGS, out_indices=(0, 1, 2, 3))
    swin.init_weights()
    ours = STViTSwinTransformer3D(
        **ARGS, **{'stgm_index': 1, 'out_indices': (0, 1, 2, 3), **kwargs})
    ours.init_weights()
    ours.load_state_dict(swin.state_dict(), strict=False)
    swin.eval()
    ours.eval()
    return swin, ours


@pytest.mark.parametrize('size', [(4, 64, 96), (6, 97, 161)])
def test_any_input_size_and_upstream_parity_before_the_stgm(size):
    swin, ours = _pair()
    x = torch.randn(2, 3, *size)
    with torch.no_grad():
        outs, swin_outs = ours(x), swin(x)
    for a, b in zip(outs[:2], swin_outs[:2]):
        assert torch.equal(a, b)
    d, h3, w3 = swin_outs[2].shape[-3:]
    grid = (d, math.ceil(h3 / 7) * 3, math.ceil(w3 / 7) * 3)
    assert outs[2].shape == (2, 128, *grid)
    assert outs[3].shape == (2, 256, *grid)
    assert all(torch.isfinite(o).all() for o in outs)


def test_outputs_do_not_depend_on_padding(monkeypatch):
    _, ours = _pair(pooling='intra_inter', global_centres=True)
    for pooler in ours.layers[2].poolers:
        for p in pooler.parameters():
            torch.nn.init.normal_(p)
    x = torch.randn(1, 3, 4, 150, 100)  # stage 3: 10x7 -> padded to 14x7
    assert_padding_invariant(ours, x, stvit_swin3d, monkeypatch, first=2)


def test_gradients_reach_new_and_replaced_parameters():
    ours = STViTSwinTransformer3D(
        **ARGS,
        stgm_index=1,
        pooling='intra_inter',
        global_centres=True,
        drop_path_rate=0.)  # a dropped branch would get no gradient
    ours.init_weights()
    ours.train()
    out = ours(torch.randn(2, 3, 4, 64, 64))
    (out * torch.randn_like(out)).sum().backward()
    for i in (2, 3):
        for name, p in ours.layers[i].named_parameters():
            if name.endswith('inter_mix'):  # zero until the projection moves
                continue
            assert p.grad is not None and p.grad.abs().sum() > 0, (i, name)


def _replaced_tables(prefix=''):
    return [
        f'{prefix}layers.{s}.blocks.{i}.attn.relative_position_{kind}'
        for s, i in [(2, 1), (2, 2), (2, 3), (3, 0)]
        for kind in ('bias_table', 'index')
    ]


def test_loads_video_swin_checkpoint_with_a_report(tmp_path):
    swin = SwinTransformer3D(**ARGS)
    state = {f'backbone.{k}': v for k, v in swin.state_dict().items()}
    state['cls_head.fc_cls.weight'] = torch.zeros(400, 256)
    torch.save(dict(state_dict=state), tmp_path / 'vswin.pth')
    ours = STViTSwinTransformer3D(
        **ARGS,
        stgm_index=1,
        init_cfg=dict(
            type='Pretrained', checkpoint=str(tmp_path / 'vswin.pth')))
    ours.init_weights()
    report = ours.load_report
    assert sorted(report['unused']) == sorted(
        _replaced_tables() + [
            f'layers.2.downsample.{name}'
            for name in ('norm.weight', 'norm.bias', 'reduction.weight')
        ])
    assert sorted(report['new']) == [
        'layers.2.expand.bias', 'layers.2.expand.weight'
    ]
    assert report['missing'] == [] and report['mismatched'] == []
    theirs = swin.state_dict()
    for key, value in ours.state_dict().items():
        if key in theirs:
            assert torch.equal(value, theirs[key]), key


def test_pretrained_without_pretrained2d_loads_as_upstream(tmp_path):
    """``pretrained=<Video Swin checkpoint>`` with ``pretrained2d=False``
    loads it, as upstream turns it into a Pretrained ``init_cfg``."""
    torch.manual_seed(0)
    swin = SwinTransformer3D(**ARGS)
    with torch.no_grad():
        for p in swin.parameters():
            p.add_(torch.randn_like(p))
    path = str(tmp_path / 'vswin.pth')  # bare names: upstream reads them
    torch.save(dict(state_dict=swin.state_dict()), path)
    ref = SwinTransformer3D(**ARGS, pretrained=path)
    ref.init_weights()
    ours = STViTSwinTransformer3D(**ARGS, stgm_index=1, pretrained=path)
    ours.init_weights()
    assert ours.init_cfg == dict(type='Pretrained', checkpoint=path)
    report = ours.load_report
    assert report['missing'] == [] and report['mismatched'] == []
    assert sorted(report['new']) == [
        'layers.2.expand.bias', 'layers.2.expand.weight'
    ]
    theirs = ref.state_dict()
    for key, value in ours.state_dict().items():
        if key in theirs:
            assert torch.equal(value, theirs[key]), key
            assert torch.equal(value, swin.state_dict()[key]), key


def test_inflates_a_2d_swin_like_upstream(tmp_path, monkeypatch):
    """An official 2-D Swin checkpoint inflates to the same weights as
    upstream Video Swin's inflation, less the replaced tables, through
    upstream's ``inflate_weights``."""
    flat = SwinTransformer3D(**dict(ARGS, window_size=(1, 7, 7)))
    state = {}
    for key, value in flat.state_dict().items():
        if key == 'patch_embed.proj.weight':
            value = torch.randn_like(value[:, :, 0])  # 2-D conv
        elif key.startswith('norm3.'):
            key = key.replace('norm3.', 'norm.')
        elif value.is_floating_point():
            value = torch.randn_like(value)
        state[key] = value
    torch.save(dict(model=state), tmp_path / 'swin2d.pth')
    args = dict(ARGS, pretrained=str(tmp_path / 'swin2d.pth'),
                pretrained2d=True)
    ref = SwinTransformer3D(**args)
    ref.init_weights()
    ours = STViTSwinTransformer3D(**args, stgm_index=1)
    calls = []
    inflate = SwinTransformer3D.inflate_weights

    def spy(target, logger):
        calls.append(target)
        return inflate(target, logger)

    monkeypatch.setattr(SwinTransformer3D, 'inflate_weights', spy)
    ours.init_weights()
    assert len(calls) == 1 and calls[0] is not ours  # a stand-in, read-only
    theirs = ref.state_dict()
    for key, value in ours.state_dict().items():
        if key in theirs and 'relative_position_index' not in key:
            assert torch.equal(value, theirs[key]), key
    assert sorted(k for k in ours.load_report['unused']
                  if 'relative_position_bias_table' in k) == sorted(
                      k for k in _replaced_tables() if 'bias_table' in k)
    assert ours.load_report['missing'] == []


@pytest.mark.parametrize('kwargs,match', [
    (dict(stgm_index=3), r'STGM at blocks \(3, 4\) does not fit'),
    (dict(stgm_index=None), 'stgm_index is needed'),
    (dict(pooling='median'), 'unknown pooling'),
    (dict(out_after_downsample=True), 'out_after_downsample'),
    (dict(window_size=(2, 7, 5)), 'square'),
    (dict(key_windows=(6, 14)), 'key_windows'),
])
def test_bad_configs_fail_at_build(kwargs, match):
    args = dict(ARGS, stgm_index=1)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        STViTSwinTransformer3D(**args)


def test_full_size_tiny_cuts_flops():
    """Full-size Video Swin-T layout (8 frames to stay fast)."""
    x = torch.randn(1, 3, 8, 224, 224)
    swin = SwinTransformer3D(arch='tiny', pretrained2d=False)
    ours = STViTSwinTransformer3D(arch='tiny', pretrained2d=False)
    assert ours.layers[2].stgm_index == 2
    ours.eval()
    with torch.no_grad():
        assert ours(x).shape == (1, 768, 4, 6, 6)
    assert count_flops(ours, x).total < count_flops(swin, x).total
