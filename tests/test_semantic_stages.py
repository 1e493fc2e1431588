"""STViT's stage rebuild is one function for 2-D and video Swin
(``build_semantic_stages``): both backbones get the same layout from it."""
import pytest
import torch.nn as nn

from mmvitaccel.models import STViTSwinTransformer  # noqa: I100
from mmvitaccel.models import STViTSwinTransformer3D
from mmvitaccel.models.stvit import semantic_swin_stage
from mmvitaccel.models.stvit.semantic_swin_stage import (
                                                         SemanticGlobalBlockSequence,
                                                         SemanticSwinBlockSequence)

DEPTHS = (1, 1, 4, 2)
HEADS = (1, 2, 4, 8)


def _stvit_2d(stgm_index):
    return STViTSwinTransformer(
        embed_dims=32, depths=DEPTHS, num_heads=HEADS, stgm_index=stgm_index)


def _stvit_3d(stgm_index):
    return STViTSwinTransformer3D(
        arch=dict(embed_dims=32, depths=list(DEPTHS), num_heads=list(HEADS)),
        pretrained2d=False, window_size=(2, 7, 7), stgm_index=stgm_index)


def _stages(model):
    return model.stages if hasattr(model, 'stages') else model.layers


@pytest.mark.parametrize('build', [_stvit_2d, _stvit_3d])
@pytest.mark.parametrize('stgm_index', [1, 2])
def test_both_hosts_get_the_same_semantic_layout(build, stgm_index):
    model = build(stgm_index)
    stages = _stages(model)
    semantic = stages[2]
    assert isinstance(semantic, SemanticSwinBlockSequence)
    kinds = [type(b).__name__ for b in semantic.blocks]
    # upstream window blocks up to the STGM, cross-attention blocks after
    assert all('CrossAttention' not in k for k in kinds[:stgm_index]), kinds
    assert all('CrossAttention' in k for k in kinds[stgm_index:]), kinds
    # the patch merging became Linear(C, 2C); the last stage has none
    assert isinstance(semantic.expand, nn.Linear)
    assert (semantic.expand.in_features,
            semantic.expand.out_features) == (128, 256)
    assert isinstance(stages[3], SemanticGlobalBlockSequence)
    assert stages[3].expand is None
    assert all('CrossAttention' in type(b).__name__
               for b in stages[3].blocks)


def test_both_hosts_go_through_the_one_rebuild(monkeypatch):
    calls = []
    real = semantic_swin_stage.build_semantic_stages

    def spy(*args, **kwargs):
        calls.append(args[1:3])
        return real(*args, **kwargs)

    from mmvitaccel.models.stvit import stvit_swin, stvit_swin3d
    monkeypatch.setattr(stvit_swin, 'build_semantic_stages', spy)
    monkeypatch.setattr(stvit_swin3d, 'build_semantic_stages', spy)
    _stvit_2d(1)
    _stvit_3d(2)
    assert calls == [(2, 1), (2, 2)]
