"""The dense-prediction study's data (``projects.digits_study.datasets.digits_scenes``):
scenes are pure functions of their seed, split, epoch and index, drawn from
their split's scans only; instance masks, boxes and the semantic map agree;
mmdet's and mmseg's own loading and packing read them; a split written as
COCO json scores a perfect AP against its own annotations with mmdet's
``CocoMetric``."""
import numpy as np
import pytest
import torch

import mmvitaccel  # noqa: F401
from projects.digits_study.datasets import (DigitsInstances, DigitsScenes,
                                            DigitsSegmentation, digits_splits)
from projects.digits_study.datasets.digits_canvas import _load_digits

SMALL = dict(canvas_size=64, num_scenes=12)


def test_a_scene_is_a_function_of_seed_split_epoch_and_index():
    train = DigitsInstances(split='train', **SMALL)
    a, b = train.scene(3, epoch=1), train.scene(3, epoch=1)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(train.scene(3, epoch=2)[0], a[0])
    assert not np.array_equal(train.scene(4, epoch=1)[0], a[0])
    test = DigitsInstances(split='test', **SMALL)
    np.testing.assert_array_equal(test.scene(3, epoch=5)[0],
                                  test.scene(3)[0])  # drawn once
    other = DigitsInstances(split='test', canvas_seed=1, **SMALL)
    assert not np.array_equal(other.scene(3)[0], test.scene(3)[0])
    # (epoch, index), as EpochSampler asks, in the pipeline too
    assert np.array_equal(train[(1, 3)]['img'], a[0])
    # the task-free base gives the same scene as arrays
    raw = DigitsScenes(split='train', **SMALL)[(1, 3)]
    for key, x in zip(('img', 'gt_labels', 'gt_boxes', 'gt_masks'), a):
        np.testing.assert_array_equal(raw[key], x)


def test_scenes_use_their_splits_scans_only():
    images, labels = _load_digits()
    for split, index in digits_splits().items():
        ds = DigitsInstances(split=split, **SMALL)
        np.testing.assert_array_equal(ds._scans, images[index])
        np.testing.assert_array_equal(ds._labels, labels[index])
        assert len(ds) == 12
    assert len(DigitsInstances(split='val')) == len(digits_splits()['val'])


@pytest.mark.parametrize('seed', range(6))
def test_masks_boxes_and_the_semantic_map_agree(seed):
    kwargs = dict(split='train', canvas_size=96, canvas_seed=seed,
                  num_scenes=4)
    inst, sem = DigitsInstances(**kwargs), DigitsSegmentation(**kwargs)
    for i in range(4):
        img, labels, boxes, masks = inst.scene(i, epoch=seed)
        assert img.shape == (96, 96, 3) and img.dtype == np.uint8
        assert 3 <= len(labels) <= 6 and masks.shape == (len(labels), 96, 96)
        assert (masks.sum(axis=0) <= 1).all(), 'an ink pixel, two owners'
        for box, mask in zip(boxes, masks):
            assert mask.sum() >= inst.draw_args['min_ink']
            ys, xs = np.nonzero(mask)
            assert tuple(box) == (xs.min(), ys.min(), xs.max() + 1,
                                  ys.max() + 1)
        seg = sem.get_data_info(i, epoch=seed)['gt_seg_map']
        expected = np.zeros((96, 96), np.uint8)
        for label, mask in zip(labels, masks):
            expected[mask] = 1 + label
        np.testing.assert_array_equal(seg, expected)
        # ink is bright: a digit's visible mask is brighter than background
        grey = img[..., 0].astype(float)
        assert grey[masks.any(0)].mean() > grey[seg == 0].mean() + 60


def test_mmdet_loading_and_packing_read_the_instances():
    from mmdet.datasets.transforms import LoadAnnotations, PackDetInputs
    ds = DigitsInstances(split='val', pipeline=[
        dict(type='mmdet.LoadAnnotations', with_bbox=True, with_mask=True),
        dict(type='mmdet.PackDetInputs')], **SMALL)
    assert LoadAnnotations and PackDetInputs
    _, labels, boxes, masks = ds.scene(2)
    sample = ds[2]['data_samples']
    gt = sample.gt_instances
    assert torch.equal(gt.labels, torch.as_tensor(labels))
    assert torch.equal(gt.bboxes.tensor, torch.as_tensor(boxes))
    np.testing.assert_array_equal(gt.masks.masks.astype(bool), masks)
    assert sample.img_id == 2 and tuple(sample.ori_shape) == (64, 64)
    assert ds.metainfo['classes'] == tuple('0123456789')


def test_mmseg_packing_reads_the_map():
    ds = DigitsSegmentation(split='val', pipeline=[
        dict(type='mmseg.PackSegInputs')], **SMALL)
    sample = ds[5]['data_samples']
    seg = ds.get_data_info(5)['gt_seg_map']
    assert torch.equal(sample.gt_sem_seg.data[0],
                       torch.as_tensor(seg, dtype=torch.int64))
    assert ds.metainfo['classes'][0] == 'background'
    assert len(ds.metainfo['classes']) == 11


#: mmdet's PackDetInputs meta keys, and the raw instances, which CocoMetric
#: turns into its ground truth when it has no annotation file
META = ('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor',
        'flip', 'flip_direction', 'instances')


@pytest.mark.parametrize('ann_file', [True, False])
def test_coco_evaluation_of_the_annotations_themselves_is_perfect(
        ann_file, tmp_path):
    """mmdet's CocoMetric against predictions that are the annotations
    themselves: AP 1 for boxes and masks (a wrong box convention, category
    id or mask encoding fails), from the split's COCO json (``to_coco``) or,
    without a file, from the packed samples' ``instances``."""
    from mmdet.evaluation import CocoMetric
    ds = DigitsInstances(split='test', pipeline=[
        dict(type='mmdet.LoadAnnotations', with_bbox=True, with_mask=True),
        dict(type='mmdet.PackDetInputs', meta_keys=META)], **SMALL)
    path = ds.to_coco(str(tmp_path / 'test.json')) if ann_file else None
    metric = CocoMetric(ann_file=path, metric=['bbox', 'segm'])
    metric.dataset_meta = ds.metainfo
    for i in range(len(ds)):
        sample = ds[i]['data_samples']
        gt = sample.gt_instances
        pred = dict(bboxes=gt.bboxes.tensor, labels=gt.labels,
                    scores=torch.ones(len(gt.labels)),
                    masks=torch.as_tensor(gt.masks.masks).bool())
        metric.process({}, [dict(sample.metainfo, pred_instances=pred)])
    results = metric.evaluate(len(ds))
    assert results['coco/bbox_mAP'] == pytest.approx(1.0)
    assert results['coco/segm_mAP'] == pytest.approx(1.0)


@pytest.mark.parametrize('bad,match', [
    (dict(split='dev'), 'split'), (dict(canvas_size=8), 'canvas_size'),
    (dict(num_digits=(0, 2)), 'num_digits'), (dict(scale=(0.5, 0.2)),
                                              'scale'),
    (dict(max_overlap=1.), 'max_overlap'), (dict(ink=0.), 'ink'),
    (dict(num_scenes=0), 'num_scenes')])
def test_bad_settings_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        DigitsInstances(**bad)
