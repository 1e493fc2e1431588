# Copyright (c) mmvitaccel contributors. All rights reserved.
"""A fixed test-time workload for two-stage detectors, so that two
detectors' speeds differ by their backbones alone (``docs/benchmarks.md``)."""
import math
import types

import torch

__all__ = ['grid_boxes', 'fix_detector_boxes', 'FIXED_WORK_OPTIONS']

#: test-time options that keep every fixed box: no NMS, no score threshold
FIXED_WORK_OPTIONS = {
    'model.test_cfg.rcnn.score_thr': 0.0,
    'model.test_cfg.rcnn.nms.iou_threshold': 1.0,
}


def grid_boxes(num, size, height, width):
    """``num`` boxes of ``size x size`` pixels on a grid, row by row.

    Args:
        num (int): number of boxes, >= 1.
        size (int): box side in pixels, at most the image's shorter side.
        height (int): image height.
        width (int): image width.

    Returns:
        Tensor: ``(num, 4)`` boxes ``(x1, y1, x2, y2)``.
    """
    if num < 1:
        raise ValueError(f'num must be >= 1, got {num}')
    if not 1 <= size <= min(height, width):
        raise ValueError(f'size must be in [1, {min(height, width)}] for a '
                         f'{height}x{width} image, got {size}')
    cols = max(1, math.ceil(math.sqrt(num * width / height)))
    rows = math.ceil(num / cols)
    xs = torch.linspace(0, width - size, cols)
    ys = torch.linspace(0, height - size, rows)
    y, x = torch.meshgrid(ys, xs, indexing='ij')
    corners = torch.stack([x.flatten(), y.flatten()], 1)[:num]
    return torch.cat([corners, corners + size], 1)


def _fixed_proposals(self, *outs, batch_img_metas, **kwargs):
    """``rpn_head.predict_by_feat``: the same grid for every image."""
    from mmengine.structures import InstanceData
    results = []
    for meta in batch_img_metas:
        h, w = meta['img_shape'][:2]
        boxes = grid_boxes(self._fixed_boxes[0], self._fixed_boxes[1], h, w)
        device = outs[0][0].device
        results.append(InstanceData(
            bboxes=boxes.to(device),
            scores=torch.ones(len(boxes), device=device),
            labels=torch.zeros(len(boxes), dtype=torch.long,
                               device=device)))
    return results


def _keep_boxes(bboxes, pred_bboxes, max_shape=None, **kwargs):
    """``bbox_coder.decode``: every box stays where it is."""
    return bboxes.clone()


def fix_detector_boxes(model, num, size=128):
    """Give a two-stage mmdet detector a fixed test-time workload, in place:
    ``num`` grid proposals per image, kept by every RoI stage.

    Args:
        model (nn.Module): an mmdet ``TwoStageDetector`` (``rpn_head``,
            ``roi_head``).
        num (int): proposals per image (e.g. the RPN's ``max_per_img``).
        size (int): side of every box in input pixels. Defaults to 128.

    Returns:
        nn.Module: ``model``.
    """
    rpn = getattr(model, 'rpn_head', None)
    roi = getattr(model, 'roi_head', None)
    if rpn is None or roi is None:
        raise ValueError(f'fixed boxes need a two-stage detector with '
                         f'rpn_head and roi_head, got {type(model).__name__}')
    if num < 1 or size < 1:
        raise ValueError(f'num and size must be >= 1, got {num} and {size}')
    rpn._fixed_boxes = (num, size)
    rpn.predict_by_feat = types.MethodType(_fixed_proposals, rpn)
    heads = roi.bbox_head
    for head in (heads if isinstance(heads, torch.nn.ModuleList) else
                 [heads]):
        head.bbox_coder.decode = _keep_boxes
    return model
