"""STViT on Video Swin: layout, sizes, padding, weights, inflation, FLOPs."""
import math

import pytest
import torch

from mmvitaccel.models import STViTSwinTransformer3D  # before mmaction
from mmaction.models.backbones.swin import SwinTransformer3D  # noqa: E402,I100
from mmvitaccel.models.stvit import stvit_swin3d
from mmvitaccel.analysis.flops import count_flops

from .tolerance import assert_rounding_close
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


def test_an_openmmlab_2d_swin_inflates_through_the_official_layout(tmp_path):
    """swin_to_official: an mmpretrain Swin classifier's weights, written in
    the official layout, inflate with upstream Video Swin's own
    ``inflate_weights`` into a model that computes, on a clip of one
    repeated frame, the 2-D Swin's features of that frame at every stage
    and time step (the patch merging's channel order included: a wrong one
    changes stages 2-4). And mmdet's converter takes the result back to
    the same tensors."""
    from mmdet.models.backbones.swin import swin_converter
    from mmpretrain.models import SwinTransformer

    from projects.digits_study.swin_layout import swin_to_official
    arch = dict(embed_dims=16, depths=[1, 1, 2, 1], num_heads=[1, 2, 2, 4])
    torch.manual_seed(0)
    flat = SwinTransformer(arch=arch, img_size=224, window_size=7,
                           out_indices=(0, 1, 2, 3), drop_path_rate=0.)
    for value in flat.state_dict().values():  # LayerNorms off unit scale
        if value.is_floating_point():
            value.copy_(0.2 * torch.randn_like(value))
    for i in range(3):  # output norms with no official place: unit, as
        getattr(flat, f'norm{i}').reset_parameters()  # upstream starts them
    classifier = {f'backbone.{k}': v for k, v in flat.state_dict().items()}
    classifier['head.fc.weight'] = torch.randn(10, 128)
    official = swin_to_official(dict(state_dict=classifier))
    assert 'norm.weight' in official and 'head.fc.weight' not in official
    # mmdet's converter leaves the official final ``norm`` as it is
    back = {k.replace('backbone.norm.', 'backbone.norm3.'): v
            for k, v in swin_converter(official).items()}
    own = {k: v for k, v in flat.state_dict().items()
           if 'relative_position_index' not in k and not k.startswith(
               ('norm0', 'norm1', 'norm2'))}
    assert set(back) == {f'backbone.{k}' for k in own}
    assert all(torch.equal(back[f'backbone.{k}'], v) for k, v in own.items())
    torch.save(dict(model=official), tmp_path / 'official.pth')
    video = SwinTransformer3D(arch=arch, patch_size=(2, 4, 4),
                              window_size=(2, 7, 7), drop_path_rate=0.,
                              out_indices=(0, 1, 2, 3), pretrained2d=True,
                              pretrained=str(tmp_path / 'official.pth'))
    video.init_weights()
    flat.double().eval()
    video.double().eval()
    frame = torch.randn(1, 3, 224, 224, dtype=torch.float64)
    with torch.no_grad():
        expected = flat(frame)
        got = video(frame.unsqueeze(2).expand(-1, -1, 4, -1, -1))
    # the same sums in another order (a 2-frame conv over equal frames with
    # halved weights; attention over two equal copies of each key), in
    # float64: the rounding bound of the longest chain of sums to the last
    # stage, under 2,048 terms (patch conv 96; per block LayerNorm, qkv,
    # 98 keys, projection and FFN over at most 4 x 128 channels; 5 blocks
    # and 3 mergings), at the features' scale
    for stage, (e, g) in enumerate(zip(expected, got)):
        for t in range(g.shape[2]):
            assert_rounding_close(g[:, :, t], e, terms=2048,
                                  msg=f'stage {stage}, time {t}')
    with pytest.raises(ValueError, match='mmdet/mmpretrain names'):
        swin_to_official(official)


@pytest.mark.parametrize('kwargs,match', [
    (dict(stgm_index=3), r'STGM at blocks \(3, 4\) does not fit'),
    # a custom depth: the paper's rule, which needs 2 blocks after the STGM
    (dict(stgm_index=None, arch=dict(TINY, depths=[1, 1, 2, 1])),
     'deep enough'),
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
