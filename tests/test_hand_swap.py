"""A hand swap gives the switch's model: an mmdet Swin config whose
backbone ``type`` alone is replaced by ours builds with upstream's own
arguments, for every Swin size, and places STGM-1 and DGSSA's static
blocks where ``tools/accelerate.py`` writes them (one rule for both, in
the method's subpackage)."""
import copy

import pytest
from mmengine.registry import DefaultScope

import mmvitaccel  # noqa: F401
from mmvitaccel.models.utils import SWIN_ARCHS
from mmvitaccel.registry import MODELS
from mmvitaccel.switch import accelerate_config
from mmvitaccel.switch.accelerate import load_upstream_config

UPSTREAM = 'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'


def _sized(size):
    """Args: size (str): a key of ``SWIN_ARCHS``. Returns: Config: the
    upstream Mask R-CNN config with that Swin's sizes, as a user writes
    them (``embed_dims``, ``depths``, ``num_heads``; no ``arch``)."""
    cfg = load_upstream_config(UPSTREAM)
    sizes = SWIN_ARCHS[size]
    cfg.model.backbone.update(embed_dims=sizes['embed_dims'],
                              depths=list(sizes['depths']),
                              num_heads=list(sizes['num_heads']))
    cfg.model.neck.in_channels = [sizes['embed_dims'] * 2**i
                                  for i in range(4)]
    return cfg


@pytest.mark.parametrize('size', ['tiny', 'small', 'base'])
@pytest.mark.parametrize('method, type_, placed', [
    ('stvit', 'STViTSwinTransformer',
     lambda m: m.stages[2].stgm_index),
    ('dgssa', 'DGSSASwinTransformer', lambda m: m.static_blocks),
])
def test_the_hand_swap_builds_where_the_switch_places(size, method, type_,
                                                      placed):
    cfg = _sized(size)
    by_hand = copy.deepcopy(cfg.model.backbone.to_dict())
    by_hand['type'] = f'mmvitaccel.{type_}'
    switched = accelerate_config(copy.deepcopy(cfg), method).model.backbone
    with DefaultScope.overwrite_default_scope('mmdet'):
        hand_model = MODELS.build(by_hand)
    key = 'stgm_index' if method == 'stvit' else 'static_blocks'
    assert placed(hand_model) == switched[key]
    assert [len(stage.blocks) for stage in hand_model.stages] == \
        list(SWIN_ARCHS[size]['depths'])
