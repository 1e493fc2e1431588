"""TokenRestoreNeck: the full grid comes back, masked and dropped forwards
restore the same grid, the pyramid has the four scales."""
import torch
from mmpretrain.models import VisionTransformer

import mmvitaccel  # noqa: F401
from mmvitaccel.models import TokenPrunedVisionTransformer, TokenRestoreNeck

from .tolerance import assert_equal, assert_rounding_close

TINY = dict(embed_dims=32, num_layers=4, num_heads=2, feedforward_channels=64)
KW = dict(arch=TINY, img_size=64, patch_size=8, out_indices=(0, 1, 2, 3),
          final_norm=False)


def _models(**kwargs):
    torch.manual_seed(0)
    vit = VisionTransformer(**KW, out_type='featmap')
    vit.init_weights()
    with torch.no_grad():
        for p in vit.parameters():
            p.add_(0.3 * torch.randn_like(p))
    ours = TokenPrunedVisionTransformer(**KW, out_type='tokens',
                                        prune_before=(1, 3), **kwargs)
    ours.load_state_dict(vit.state_dict())
    vit.eval()  # mmpretrain backbones' train() returns None
    ours.eval()
    return vit, ours


def test_restored_grid_masked_equals_dropped_and_keeps_the_tokens():
    _, ours = _models(selector='mass', mass_threshold=0.6)
    ours.double()
    x = torch.randn(2, 3, 64, 64, dtype=torch.double)
    with torch.no_grad():
        dropped = ours(x)
        masks = ours.keep_masks
        ours.set_pruning(test_execution='mask')
        masked = ours(x)
    last = dropped[-1]
    assert last.tokens.shape[1] - 1 < 64  # tokens were really dropped
    assert 0 < int(masks[-1][0].sum()) < 64
    for d, m in zip(dropped, masked):
        grid_d, grid_m = d.restore(), m.restore()
        assert grid_d.shape == (2, 32, 8, 8)
        # float64, masked attention over all tokens against the kept ones:
        # patch conv (192) and 4 layers of ~370 (norms, qkv, proj, fc1 of
        # 32, fc2 64, d = 16, 65 tokens twice): n < 2000
        assert_rounding_close(grid_d, grid_m, 2000)
    # kept positions hold the final tokens; a position pruned before layer 1
    # holds its layer-0 output
    grid = last.restore().flatten(2).transpose(1, 2)  # (B, N, C)
    for b in range(2):
        index = last.index[b][last.alive[b]]
        assert_equal(grid[b, index],  # scattered copies
                     last.tokens[b, 1:][last.alive[b]])
        early = (~masks[0][b]).nonzero().flatten()
        first = dropped[0].restore().flatten(2).transpose(1, 2)
        assert_equal(grid[b, early], first[b, early])


def test_dense_restore_is_upstream_featmap_and_pyramid_scales():
    vit, ours = _models(selector='mass', mass_threshold=1.0)
    x = torch.randn(2, 3, 64, 64)
    neck = TokenRestoreNeck(32, norm_cfg=dict(type='BN'))
    neck.eval()
    with torch.no_grad():
        ref = vit(x)
        out = ours(x)
        for a, b in zip(ref, out):
            assert torch.equal(a, TokenRestoreNeck.restore(b))
        pyramid = neck(out)
        assert torch.equal(pyramid[2], ref[2])  # the 1x level is identity
    assert [tuple(p.shape[-2:]) for p in pyramid] == [(32, 32), (16, 16),
                                                       (8, 8), (4, 4)]


def test_restore_neck_then_mmdet_fpn():
    """mmdet detectors take ``neck=[TokenRestoreNeck, FPN]`` (a list builds
    an ``nn.Sequential``)."""
    from mmdet.registry import MODELS as MMDET_MODELS
    from mmengine.registry import DefaultScope
    _, ours = _models(selector='mass', mass_threshold=0.6)
    # as inside an mmdet runner (earlier tests may leave another scope)
    with DefaultScope.overwrite_default_scope('mmdet'):
        neck = MMDET_MODELS.build([
            dict(type='mmvitaccel.TokenRestoreNeck', embed_dims=32,
                 norm_cfg=dict(type='BN')),
            dict(type='FPN', in_channels=[32] * 4, out_channels=16,
                 num_outs=5)
        ])
    neck.eval()
    with torch.no_grad():
        outs = neck(ours(torch.randn(1, 3, 64, 64)))
    assert [tuple(o.shape) for o in outs] == [(1, 16, 32, 32), (1, 16, 16, 16),
                                              (1, 16, 8, 8), (1, 16, 4, 4),
                                              (1, 16, 2, 2)]
