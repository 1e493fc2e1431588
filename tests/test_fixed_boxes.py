"""A fixed test-time workload for two-stage detectors
(mmvitaccel.analysis.fixed_boxes, benchmark.py --fixed-boxes): two detectors
with different backbones and random weights see the same boxes in every RoI
stage and keep the same number of equal-size detections (without the fix
their random RPNs and box regressions would give each its own boxes)."""
import os.path as osp

import pytest
import torch

from mmvitaccel.analysis.fixed_boxes import (FIXED_WORK_OPTIONS,
                                             fix_detector_boxes, grid_boxes)
from mmvitaccel.apis.harness import build_model, dummy_data_batch, load_config

from .tolerance import rounding_tol
from .utils import REPO, TINY_MODELS

CONFIGS = ('configs/_base_/swin_s_cascade_mask_rcnn_3x_coco.py',
           'configs/stvit_r_swin_s_coco.py')
NUM, SIZE, SHAPE = 40, 32, (96, 128)


def _equal_to(sides, size):
    """``sides == size`` up to float32 rounding: the corners (<= 128 + 32)
    pass through <= 4 roundings (the box coder's centre and size and back,
    the difference here)."""
    tol = rounding_tol(torch.float32, 4, max(SHAPE) + SIZE)
    return bool(((sides - size).abs() <= tol).all())


def test_grid_boxes_are_equal_and_inside():
    boxes = grid_boxes(NUM, SIZE, *SHAPE)
    assert boxes.shape == (NUM, 4)
    assert _equal_to(boxes[:, 2:] - boxes[:, :2], SIZE)
    assert boxes[:, :2].min() >= 0
    assert boxes[:, 2].max() <= SHAPE[1] and boxes[:, 3].max() <= SHAPE[0]
    assert len({tuple(b) for b in boxes.tolist()}) == NUM
    with pytest.raises(ValueError, match='size must be in'):
        grid_boxes(NUM, 200, *SHAPE)


def _roi_inputs(config, seed):
    """The rois entering every box stage and the mask stage of a tiny
    Cascade Mask R-CNN's ``test_step``, and its detections."""
    cfg = load_config(osp.join(REPO, config),
                      {**TINY_MODELS[config], **FIXED_WORK_OPTIONS})
    torch.manual_seed(seed)
    model = build_model(cfg)
    fix_detector_boxes(model, NUM, SIZE)
    seen = {}

    def record(name):
        def hook(module, args):
            seen.setdefault(name, []).append(args[1].clone())
        return hook

    roi = model.roi_head
    for i, extractor in enumerate(roi.bbox_roi_extractor):
        extractor.register_forward_pre_hook(record(f'box{i}'))
    roi.mask_roi_extractor[-1].register_forward_pre_hook(record('mask'))
    torch.manual_seed(0)
    batch = dummy_data_batch('mmdet', SHAPE, 1)
    with torch.no_grad():
        pred, = model.test_step(batch)
    return seen, pred.pred_instances, cfg.model.test_cfg.rcnn.max_per_img


def _sides(rois):
    return torch.cat([rois[:, 3] - rois[:, 1], rois[:, 4] - rois[:, 2]])


@pytest.mark.slow
def test_two_detectors_do_the_same_head_work():
    (a, det_a, keep), (b, det_b, _) = (_roi_inputs(CONFIGS[0], 0),
                                       _roi_inputs(CONFIGS[1], 1))
    grid = grid_boxes(NUM, SIZE, *SHAPE)
    for stage in ('box0', 'box1', 'box2'):
        ra, = a[stage]
        rb, = b[stage]
        assert torch.equal(ra, rb), stage  # the same boxes, every stage
        assert torch.equal(ra[:, 1:], grid)
    for rois, det in ((a['mask'][-1], det_a), (b['mask'][-1], det_b)):
        assert len(det) == keep == len(rois)  # nothing suppressed
        assert _equal_to(_sides(rois), SIZE)  # equal mask work
        assert _equal_to(det.bboxes[:, 2:] - det.bboxes[:, :2], SIZE)


def test_fixed_boxes_need_a_two_stage_detector():
    with pytest.raises(ValueError, match='two-stage detector'):
        fix_detector_boxes(torch.nn.Linear(2, 2), NUM)
