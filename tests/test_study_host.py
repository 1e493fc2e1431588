"""The study host's pieces: the convolutional patch stem
(``mmvitaccel.ConvStem``) inside mmpretrain's ViT and the method backbones,
and the random token scorer."""
import os.path as osp

import pytest
import torch
from mmengine.config import Config

import mmvitaccel  # noqa: F401
from mmvitaccel.apis.harness import build_model
from projects.digits_study.conv_stem import ConvStem
from mmvitaccel.ops import SCORERS, random_score

from .utils import (REPO, small_digits_run,
                    train_and_predict_one_batch)

CONVSTEM = 'configs/study/digits_deit_host_convstem.py'


@pytest.mark.parametrize('stride', [2, 4, 8])
def test_conv_stem_gives_the_patch_grid(stride):
    stem = ConvStem(3, 24, stride, stride)
    out = stem(torch.randn(2, 3, 32, 48))
    assert out.shape == (2, 24, 32 // stride, 48 // stride)


@pytest.mark.parametrize('bad', [
    dict(kernel_size=4, stride=3), dict(kernel_size=8, stride=4),
    dict(kernel_size=4, stride=4, padding=1),
    dict(kernel_size=4, stride=4, dilation=2)
])
def test_conv_stem_refuses_a_grid_it_cannot_reproduce(bad):
    with pytest.raises(ValueError, match='stride|kernel_size'):
        ConvStem(3, 8, **bad)


@pytest.mark.parametrize('backbone', [
    dict(type='mmvitaccel.TokenPrunedVisionTransformer', scorer='tis',
         selector='value', density=0.5, prune_before=(3, )),
    dict(type='mmvitaccel.STViTDeiT', semantic_tokens=16,
         out_type='avg_featmap'),
])
def test_method_backbones_take_the_conv_stem(backbone):
    """The methods subclass mmpretrain's ViT, so the stem is a patch_cfg
    away: the same grid and the host's stem weights under the same
    names."""
    cfg = Config.fromfile(osp.join(REPO, CONVSTEM))
    host = build_model(cfg)
    cfg.model.backbone.update(backbone)
    model = build_model(cfg)
    stem = {k for k in model.state_dict() if 'patch_embed' in k}
    assert stem == {k for k in host.state_dict() if 'patch_embed' in k}
    assert model.backbone.patch_resolution == (8, 8)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_conv_stem_config_trains_one_step_and_predicts(tmp_path):
    cfg = Config.fromfile(osp.join(REPO, CONVSTEM))
    small_digits_run(cfg, tmp_path)
    updates = {}
    losses, preds, _ = train_and_predict_one_batch(cfg, updates)
    assert torch.isfinite(losses['loss']) and len(preds) == 8
    assert all(v for k, v in updates.items() if 'patch_embed' in k)


def test_random_scorer_is_uniform_seeded_and_shaped():
    assert 'random' in SCORERS
    attn = torch.rand(3, 2, 17, 17)
    torch.manual_seed(0)
    a = random_score(attn)
    torch.manual_seed(0)
    assert torch.equal(a, random_score(attn)) and a.shape == (3, 16)
    assert not torch.equal(a, random_score(attn))
    # independent of the attention: a permuted map gives the same draw
    torch.manual_seed(0)
    assert torch.equal(a, random_score(attn.flip(-1)))
    many = random_score(torch.zeros(4000, 1, 11, 11))
    # a statistic, not rounding: uniform scores over 4000 x 10 patches have
    # a mean of 0.5 with sigma 0.29 / sqrt(40000) = 0.0015: 0.01 is 7 sigma
    assert abs(many.mean().item() - 0.5) < 0.01


def test_the_study_method_configs_take_the_host_weights(tmp_path):
    """The TIS-pruned host loads the host's checkpoint with nothing missing
    or left over and equals it at density 1; the Integrated-DeiT digits
    config builds on the host's token grid (65 tokens)."""
    host_cfg = Config.fromfile(osp.join(REPO, 'configs/study/'
                                        'digits_deit_host.py'))
    host = build_model(host_cfg)
    ckpt = str(tmp_path / 'host.pth')
    torch.save(dict(state_dict=host.state_dict()), ckpt)
    tis = build_model(Config.fromfile(
        osp.join(REPO, 'configs/study/digits_deit_host_tis.py')))
    assert set(tis.state_dict()) == set(host.state_dict())
    tis.load_state_dict(host.state_dict(), strict=True)
    x = torch.randn(2, 3, 32, 32)
    tis.backbone.set_pruning(density=1.0)
    torch.testing.assert_close(tis(x, mode='tensor'), host(x, mode='tensor'),
                               rtol=0, atol=0)
    tis.backbone.set_pruning(density=0.5)
    tis(x, mode='tensor')
    assert tis.backbone.token_counts[0, -1].item() == 1 + 32
    glad = build_model(Config.fromfile(
        osp.join(REPO, 'configs/study/integrated_deit_digits.py')))
    assert glad.backbone.patch_resolution == (8, 8)
    assert glad(x, mode='tensor').shape == (2, 10)
