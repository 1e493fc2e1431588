"""STViT-Swin backbone (plain STViT): layout, sizes, padding, weights, FLOPs."""
import math

import pytest
import torch
from mmdet.models.backbones import SwinTransformer

from mmvitaccel.models import STViTSwinTransformer
from mmvitaccel.models.stvit import semantic_swin_stage
from mmvitaccel.models.stvit import CrossAttentionSwinBlock
from mmvitaccel.analysis.flops import count_flops
from mmvitaccel.models.utils import SWIN_ARCHS

from .utils import assert_padding_invariant

TINY = dict(embed_dims=32, depths=(1, 1, 6, 1), num_heads=(1, 2, 4, 8))
ALL = dict(out_indices=(0, 1, 2, 3), out_type='featmap')


def _pair(**kwargs):
    """Swin and STViT with the same weights, in eval mode."""
    torch.manual_seed(0)
    swin = SwinTransformer(**TINY)
    swin.init_weights()
    ours = STViTSwinTransformer(**TINY, **{'stgm_index': 2, **kwargs})
    ours.init_weights()
    ours.load_state_dict(swin.state_dict(), strict=False)
    swin.eval()
    ours.eval()
    return swin, ours


def test_layout_follows_the_paper():
    ours = STViTSwinTransformer(arch='tiny')
    blocks = ours.stages[2].blocks
    assert ours.stages[2].stgm_index == 2  # blocks 3-4 of Swin-T, 1-based
    assert not any(isinstance(b, CrossAttentionSwinBlock) for b in blocks[:2])
    assert all(isinstance(b, CrossAttentionSwinBlock) for b in blocks[2:])
    assert all(
        isinstance(b, CrossAttentionSwinBlock)
        for b in ours.stages[3].blocks)
    assert ours.stages[2].expand.weight.shape == (768, 384)
    assert STViTSwinTransformer(arch='small').stages[2].stgm_index == 10
    assert STViTSwinTransformer(arch='tiny', move_stgm=True).stages[2] \
        .stgm_index == 1
    assert STViTSwinTransformer(arch='base', move_stgm=True).stages[2] \
        .stgm_index == 8


@pytest.mark.parametrize('size', [(224, 224), (225, 313), (97, 161)])
def test_any_input_size(size):
    swin, ours = _pair(**ALL)
    ours_all = STViTSwinTransformer(
        **TINY, stgm_index=2, out_indices=(0, 1, 2, 3))
    ours_all.eval()
    x = torch.randn(2, 3, *size)
    with torch.no_grad():
        outs, swin_outs = ours(x), swin(x)
        pooled = ours_all(x)
    # stages before the semantic one: upstream Swin maps, the same values
    for a, b in zip(outs[:2], swin_outs[:2]):
        assert torch.equal(a, b)
    # from stage 3 on: the semantic grid, 3x3 tokens per 7x7 window
    h3, w3 = swin_outs[2].shape[-2:]
    grid = (math.ceil(h3 / 7) * 3, math.ceil(w3 / 7) * 3)
    assert outs[2].shape == (2, 128, *grid)
    assert outs[3].shape == (2, 256, *grid)
    assert [p.shape for p in pooled] == [(2, c) for c in (32, 64, 128, 256)]
    assert all(torch.isfinite(o).all() for o in outs + pooled)


def test_outputs_do_not_depend_on_padding(monkeypatch):
    """Fill the semantic stage's padding with noise: nothing changes, and
    the mean head only sees valid semantic tokens."""
    _, ours = _pair(pooling='intra_inter', global_centres=True)
    for pooler in ours.stages[2].poolers:
        for p in pooler.parameters():
            torch.nn.init.normal_(p)
    x = torch.randn(1, 3, 150, 100)  # stage 3: 10x7 -> padded to 14x7
    assert_padding_invariant(ours, x, semantic_swin_stage, monkeypatch)


def test_gradients_reach_new_and_replaced_parameters():
    ours = STViTSwinTransformer(
        **TINY,
        stgm_index=2,
        pooling='intra_inter',
        global_centres=True,
        out_indices=(3, ),
        drop_path_rate=0.)  # a dropped branch would get no gradient
    ours.init_weights()
    ours.train()
    out = ours(torch.randn(2, 3, 64, 96))[0]
    # a random readout: the sum of a LayerNorm output has no gradient
    (out * torch.randn_like(out)).sum().backward()
    for i in (2, 3):
        for name, p in ours.stages[i].named_parameters():
            if name.endswith('inter_mix'):  # zero until the projection moves
                continue
            assert p.grad is not None and p.grad.abs().sum() > 0, (i, name)


def test_loads_swin_weights_with_a_clear_report(tmp_path):
    swin = SwinTransformer(**TINY, out_indices=(3, ))
    torch.save(dict(state_dict=swin.state_dict()), tmp_path / 'swin.pth')
    ours = STViTSwinTransformer(
        **TINY,
        stgm_index=2,
        pooling='intra_inter',
        init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path /
                                                        'swin.pth')))
    ours.init_weights()
    report = ours.load_report
    replaced = [(2, i) for i in range(2, 6)] + [(3, 0)]
    assert sorted(report['unused']) == sorted(
        [f'stages.{s}.blocks.{i}.attn.w_msa.relative_position_{kind}'
         for s, i in replaced for kind in ('bias_table', 'index')] +
        [f'stages.2.downsample.{name}' for name in
         ('norm.weight', 'norm.bias', 'reduction.weight')])
    assert sorted(report['new']) == sorted(
        ['stages.2.expand.weight', 'stages.2.expand.bias'] +
        [f'stages.2.poolers.0.{name}' for name in
         ('intra.weight', 'inter.weight', 'inter.bias', 'inter_mix')])
    assert report['missing'] == [] and report['mismatched'] == []
    state = swin.state_dict()
    for key, value in ours.state_dict().items():
        if key in state:
            assert torch.equal(value, state[key]), key


@pytest.mark.parametrize('kwargs,match', [
    (dict(stgm_index=5), r'STGM at blocks \(5, 6\) does not fit'),
    # a custom depth: the paper's rule, which needs 2 blocks after the STGM
    (dict(stgm_index=None, depths=(1, 1, 2, 1)), 'deep enough'),
    (dict(out_type='cls_token'), 'unknown out_type'),
    (dict(pooling='median'), 'unknown pooling'),
    (dict(semantic_stage=4), 'does not exist'),
    (dict(key_windows=(10, )), 'key_windows'),
])
def test_bad_configs_fail_at_build(kwargs, match):
    args = dict(TINY, stgm_index=2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        STViTSwinTransformer(**args)


def test_full_size_cuts_flops():
    """Full-size STViT-Swin-T at 224: fewer FLOPs than Swin-T, and fewer
    still with the STGM moved one block earlier."""
    x = torch.randn(1, 3, 224, 224)
    swin = SwinTransformer(**SWIN_ARCHS['tiny'], out_indices=(3, ))
    flops = [count_flops(swin, x).total]
    for move in (False, True):
        ours = STViTSwinTransformer(arch='tiny', move_stgm=move)
        ours.eval()
        with torch.no_grad():
            assert ours(x)[0].shape == (1, 768)
        flops.append(count_flops(ours, x).total)
    assert flops[0] > flops[1] > flops[2]
