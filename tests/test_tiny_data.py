"""The tiny datasets load through the upstream dataset classes and pipelines,
and their annotations are deterministic and self-consistent."""
import os
import os.path as osp
import runpy
import sys

import numpy as np
import pytest
import torch

from mmvitaccel.tiny import data as tiny_data
from mmvitaccel.tiny.data import (ADE20K_LABELS, COCO_CATEGORIES,
                                  COCO_OBJECTS, MARKER, MAX_IMAGENET_CLASSES,
                                  imagenet, make_tiny_ade20k, make_tiny_coco,
                                  make_tiny_imagenet, make_tiny_kinetics,
                                  tiny_data_root)

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))

# Small sizes keep the whole file fast; each entry is (generator, kwargs,
# files that change with the seed).
SMALL = {
    'imagenet': (make_tiny_imagenet,
                 dict(num_classes=4, num_train_per_class=2,
                      num_val_per_class=2),
                 ['meta/val.txt', 'val/ILSVRC2012_val_00000001.JPEG']),
    'coco': (make_tiny_coco, dict(num_train=4, num_val=3), [
        'annotations/instances_train2017.json',
        'annotations/instances_val2017.json'
    ]),
    'ade20k': (make_tiny_ade20k, dict(num_train=2, num_val=3), [
        'annotations/training/ADE_train_00000001.png',
        'annotations/validation/ADE_val_00000003.png'
    ]),
    'kinetics': (make_tiny_kinetics,
                 dict(num_train_per_class=2, num_val_per_class=1,
                      num_frames=12),
                 ['kinetics400_train_list_videos.txt',
                  'kinetics400_val_list_videos.txt']),
}


def _files(root):
    """relative path -> bytes of every file under ``root``."""
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = osp.join(folder, name)
            with open(path, 'rb') as f:
                found[osp.relpath(path, root)] = f.read()
    return found


@pytest.fixture(scope='module')
def small_data(tmp_path_factory):
    """kind -> root of the small dataset generated with seed 0."""
    base = tmp_path_factory.mktemp('tiny')
    return {
        kind: make(str(base / kind), **kwargs)
        for kind, (make, kwargs, _) in SMALL.items()
    }


@pytest.mark.parametrize('kind', sorted(SMALL))
def test_deterministic(kind, small_data, tmp_path):
    make, kwargs, seeded = SMALL[kind]
    same = _files(make(str(tmp_path / 'same'), **kwargs))
    assert same == _files(small_data[kind])
    other = _files(make(str(tmp_path / 'other'), seed=1, **kwargs))
    assert sorted(other) == sorted(same)
    for name in seeded:
        assert other[name] != same[name], name


def test_idempotent_and_atomic(tmp_path, monkeypatch):
    root = str(tmp_path / 'imagenet')
    kwargs = dict(num_classes=2, num_train_per_class=1, num_val_per_class=1)

    def fail(*args):
        raise RuntimeError('interrupted')

    with monkeypatch.context() as m:
        m.setattr(imagenet, '_write_text', fail)
        with pytest.raises(RuntimeError, match='interrupted'):
            make_tiny_imagenet(root, **kwargs)
    # nothing half-written is left behind
    assert os.listdir(tmp_path) == []

    assert make_tiny_imagenet(root, **kwargs) == root
    marker = osp.join(root, MARKER)
    stamp = os.stat(marker).st_mtime_ns
    make_tiny_imagenet(root, **kwargs)
    assert os.stat(marker).st_mtime_ns == stamp

    # other parameters replace the dataset
    make_tiny_imagenet(root, **{**kwargs, 'num_classes': 3})
    with open(osp.join(root, 'meta', 'train.txt')) as f:
        assert len(f.readlines()) == 3
    assert os.listdir(tmp_path) == ['imagenet']

    foreign = tmp_path / 'foreign'
    foreign.mkdir()
    (foreign / 'keep.txt').write_text('mine')
    with pytest.raises(FileExistsError):
        make_tiny_imagenet(str(foreign), **kwargs)
    assert os.listdir(foreign) == ['keep.txt']


def test_tiny_data_root_and_cli(tmp_path, monkeypatch):
    monkeypatch.setenv(tiny_data.ENV_ROOT, str(tmp_path / 'env'))
    root = tiny_data_root('ade20k')
    assert root == str(tmp_path / 'env' / 'ade20k')
    assert len(os.listdir(osp.join(root, 'images', 'training'))) == 8
    assert tiny_data_root('ade20k', str(tmp_path / 'env')) == root

    monkeypatch.delenv(tiny_data.ENV_ROOT)
    monkeypatch.chdir(tmp_path)
    assert tiny_data.default_tiny_data_dir() == str(tmp_path / 'data' /
                                                    'tiny')
    with pytest.raises(KeyError):
        tiny_data_root('cityscapes')

    monkeypatch.setattr(sys, 'argv', [
        'make_tiny_data.py', 'coco', '--out',
        str(tmp_path / 'cli'), '--seed', '3'
    ])
    runpy.run_path(
        osp.join(REPO, 'tools', 'data', 'make_tiny_data.py'),
        run_name='__main__')
    assert os.path.isfile(
        tmp_path / 'cli' / 'coco' / 'annotations' /
        'instances_val2017.json')


def test_imagenet(small_data, tmp_path):
    from mmpretrain.datasets import ImageNet
    from mmpretrain.registry import DATASETS

    train = DATASETS.build(
        dict(
            type='ImageNet',
            _scope_='mmpretrain',
            data_root=small_data['imagenet'],
            split='train',
            pipeline=[
                dict(type='LoadImageFromFile'),
                dict(type='RandomResizedCrop', scale=56),
                dict(type='RandomFlip', prob=0.5, direction='horizontal'),
                dict(type='PackInputs'),
            ]))
    assert len(train) == 8
    assert len(train.metainfo['classes']) == 1000
    sample = train[0]
    assert sample['inputs'].shape == (3, 56, 56)
    assert sample['data_samples'].gt_label.tolist() == [0]

    val = DATASETS.build(
        dict(
            type='ImageNet',
            _scope_='mmpretrain',
            data_root=small_data['imagenet'],
            split='val',
            pipeline=[
                dict(type='LoadImageFromFile'),
                dict(type='ResizeEdge', scale=72, edge='short'),
                dict(type='CenterCrop', crop_size=64),
                dict(type='PackInputs'),
            ]))
    assert sorted(val.get_gt_labels().tolist()) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert val[0]['inputs'].shape == (3, 64, 64)

    # a Tiny-ImageNet shaped set: 200 classes of 64x64 images, class folders
    # sorted in label order
    classes = {imagenet._imagenet_class(i) for i in range(
        MAX_IMAGENET_CLASSES)}
    assert len(classes) == MAX_IMAGENET_CLASSES >= 200
    root = make_tiny_imagenet(
        str(tmp_path / 'tinyimagenet'),
        num_classes=200,
        num_train_per_class=1,
        num_val_per_class=0)
    folders = os.listdir(osp.join(root, 'train'))
    assert sorted(folders) == [imagenet._imagenet_folder(i)
                               for i in range(200)]
    tiny = ImageNet(data_root=root, split='train')
    assert sorted(tiny.get_gt_labels().tolist()) == list(range(200))
    assert tiny[199]['img_path'].endswith('.JPEG')


def _coco_dataset(root, split, pipeline):
    from mmdet.registry import DATASETS
    return DATASETS.build(
        dict(
            type='CocoDataset',
            _scope_='mmdet',
            data_root=root,
            ann_file=f'annotations/instances_{split}2017.json',
            data_prefix=dict(img=f'{split}2017/'),
            filter_cfg=dict(filter_empty_gt=True, min_size=4),
            pipeline=pipeline))


def test_coco_loads(small_data):
    from mmdet.datasets import CocoDataset

    assert [name for _, name, _ in COCO_CATEGORIES
            ] == list(CocoDataset.METAINFO['classes'])
    object_labels = {
        CocoDataset.METAINFO['classes'].index(name)
        for name in COCO_OBJECTS
    }
    width, height = 160, 128
    for split, num_images in (('train', 4), ('val', 3)):
        dataset = _coco_dataset(small_data['coco'], split, [
            dict(type='LoadImageFromFile'),
            dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
            dict(type='Resize', scale=(320, 256), keep_ratio=True),
            dict(type='PackDetInputs'),
        ])
        # no image is empty, so none is filtered out
        assert len(dataset) == num_images
        for i in range(len(dataset)):
            item = dataset[i]
            assert item['inputs'].shape == (3, 256, 320)
            gt = item['data_samples'].gt_instances
            assert 1 <= len(gt) <= 4
            assert gt.bboxes.tensor.shape == (len(gt), 4)
            assert gt.masks.masks.shape == (len(gt), 256, 320)
            assert set(gt.labels.tolist()) <= object_labels

            # boxes lie in the image and match the mask extents
            info = dataset.get_data_info(i)
            assert (info['width'], info['height']) == (width, height)
            for instance in info['instances']:
                x1, y1, x2, y2 = instance['bbox']
                assert 0 <= x1 < x2 <= width and 0 <= y1 < y2 <= height
        unscaled = _coco_dataset(small_data['coco'], split, [
            dict(type='LoadImageFromFile'),
            dict(type='LoadAnnotations', with_bbox=True, with_mask=True)
        ])
        for results in unscaled:
            masks = results['gt_masks'].masks
            for box, mask in zip(results['gt_bboxes'].tensor.numpy(), masks):
                ys, xs = np.nonzero(mask)
                extent = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
                # the sharp tips of stars and triangles can miss the last
                # pixel centre, hence the slack
                np.testing.assert_allclose(extent, box, atol=2.0)


def test_coco_ground_truth_scores_full_ap(small_data):
    from mmdet.evaluation import CocoMetric
    from mmengine.structures import InstanceData

    root = small_data['coco']
    dataset = _coco_dataset(root, 'val', [
        dict(type='LoadImageFromFile'),
        dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
        dict(type='PackDetInputs'),
    ])
    metric = CocoMetric(
        ann_file=osp.join(root, 'annotations', 'instances_val2017.json'),
        metric=['bbox', 'segm'])
    metric.dataset_meta = dataset.metainfo
    for item in dataset:
        sample = item['data_samples']
        gt = sample.gt_instances
        sample.pred_instances = InstanceData(
            bboxes=gt.bboxes.tensor,
            scores=torch.ones(len(gt)),
            labels=gt.labels,
            masks=torch.from_numpy(gt.masks.to_ndarray()).bool())
        metric.process({}, [sample.to_dict()])
    results = metric.evaluate(len(dataset))
    # a metric, not a rounding comparison: the ground truth scores full AP,
    # which CocoMetric reports to 3 decimals (hence 1e-3)
    assert results['coco/bbox_mAP'] == pytest.approx(1.0, abs=1e-3)
    assert results['coco/segm_mAP'] == pytest.approx(1.0, abs=1e-3)


def test_ade20k(small_data):
    from mmseg.datasets import ADE20KDataset
    from mmseg.registry import DATASETS

    classes = ADE20KDataset.METAINFO['classes']
    for name, value in ADE20K_LABELS.items():
        if name != 'other':
            assert classes[value - 1].strip() == name

    for split, num_images in (('training', 2), ('validation', 3)):
        dataset = DATASETS.build(
            dict(
                type='ADE20KDataset',
                _scope_='mmseg',
                data_root=small_data['ade20k'],
                data_prefix=dict(
                    img_path=f'images/{split}',
                    seg_map_path=f'annotations/{split}'),
                pipeline=[
                    dict(type='LoadImageFromFile'),
                    dict(type='LoadAnnotations', reduce_zero_label=True),
                    dict(type='Resize', scale=(64, 64), keep_ratio=True),
                    dict(type='PackSegInputs'),
                ]))
        assert len(dataset) == num_images
        for item in dataset:
            assert item['inputs'].shape == (3, 64, 64)
            seg = item['data_samples'].gt_sem_seg.data
            assert seg.shape == (1, 64, 64)
            values = set(seg.unique().tolist())
            assert values <= set(range(150)) | {255}
            # at least two background bands and one object
            assert len(values - {255}) >= 3


def test_kinetics(small_data):
    import decord
    import mmaction.datasets  # noqa: F401  (registers the transforms)
    from mmaction.registry import DATASETS

    root = small_data['kinetics']
    for split, num_videos in (('train', 8), ('val', 4)):
        dataset = DATASETS.build(
            dict(
                type='VideoDataset',
                _scope_='mmaction',
                ann_file=osp.join(root,
                                  f'kinetics400_{split}_list_videos.txt'),
                data_prefix=dict(video=osp.join(root, f'videos_{split}')),
                pipeline=[
                    dict(type='DecordInit'),
                    dict(
                        type='SampleFrames',
                        clip_len=4,
                        frame_interval=2,
                        num_clips=1),
                    dict(type='DecordDecode'),
                    dict(type='Resize', scale=(-1, 32)),
                    dict(type='FormatShape', input_format='NCTHW'),
                    dict(type='PackActionInputs'),
                ]))
        assert len(dataset) == num_videos
        labels = []
        for item in dataset:
            assert item['inputs'].shape == (1, 3, 4, 32, 32)
            labels += item['data_samples'].gt_label.tolist()
        assert sorted(labels) == sorted(list(range(4)) * (num_videos // 4))

    reader = decord.VideoReader(
        osp.join(root, 'videos_train', 'train_00000.mp4'))
    assert len(reader) == 12
    assert reader[0].shape == (64, 64, 3)
