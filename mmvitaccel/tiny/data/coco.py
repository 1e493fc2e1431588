"""The tiny COCO 2017 instance segmentation dataset."""
import json
import os
import os.path as osp

import cv2
import numpy as np

from mmvitaccel.tiny.data.common import (_COLOURS, _ensure, _fill, _jitter,
                                         _polygon_area, _polygon_mask,
                                         _progress, _random_polygon, _rng,
                                         _texture, _write_jpeg)

# The 80 COCO categories: (id, name, supercategory), ids as in the official
# annotations (non-contiguous 1..90).
COCO_CATEGORIES = (
    (1, 'person', 'person'), (2, 'bicycle', 'vehicle'), (3, 'car', 'vehicle'),
    (4, 'motorcycle', 'vehicle'), (5, 'airplane', 'vehicle'),
    (6, 'bus', 'vehicle'), (7, 'train', 'vehicle'), (8, 'truck', 'vehicle'),
    (9, 'boat', 'vehicle'), (10, 'traffic light', 'outdoor'),
    (11, 'fire hydrant', 'outdoor'), (13, 'stop sign', 'outdoor'),
    (14, 'parking meter', 'outdoor'), (15, 'bench', 'outdoor'),
    (16, 'bird', 'animal'), (17, 'cat', 'animal'), (18, 'dog', 'animal'),
    (19, 'horse', 'animal'), (20, 'sheep', 'animal'), (21, 'cow', 'animal'),
    (22, 'elephant', 'animal'), (23, 'bear', 'animal'),
    (24, 'zebra', 'animal'), (25, 'giraffe', 'animal'),
    (27, 'backpack', 'accessory'), (28, 'umbrella', 'accessory'),
    (31, 'handbag', 'accessory'), (32, 'tie', 'accessory'),
    (33, 'suitcase', 'accessory'), (34, 'frisbee', 'sports'),
    (35, 'skis', 'sports'), (36, 'snowboard', 'sports'),
    (37, 'sports ball', 'sports'), (38, 'kite', 'sports'),
    (39, 'baseball bat', 'sports'), (40, 'baseball glove', 'sports'),
    (41, 'skateboard', 'sports'), (42, 'surfboard', 'sports'),
    (43, 'tennis racket', 'sports'), (44, 'bottle', 'kitchen'),
    (46, 'wine glass', 'kitchen'), (47, 'cup', 'kitchen'),
    (48, 'fork', 'kitchen'), (49, 'knife', 'kitchen'),
    (50, 'spoon', 'kitchen'), (51, 'bowl', 'kitchen'), (52, 'banana', 'food'),
    (53, 'apple', 'food'), (54, 'sandwich', 'food'), (55, 'orange', 'food'),
    (56, 'broccoli', 'food'), (57, 'carrot', 'food'), (58, 'hot dog', 'food'),
    (59, 'pizza', 'food'), (60, 'donut', 'food'), (61, 'cake', 'food'),
    (62, 'chair', 'furniture'), (63, 'couch', 'furniture'),
    (64, 'potted plant', 'furniture'), (65, 'bed', 'furniture'),
    (67, 'dining table', 'furniture'), (70, 'toilet', 'furniture'),
    (72, 'tv', 'electronic'), (73, 'laptop', 'electronic'),
    (74, 'mouse', 'electronic'), (75, 'remote', 'electronic'),
    (76, 'keyboard', 'electronic'), (77, 'cell phone', 'electronic'),
    (78, 'microwave', 'appliance'), (79, 'oven', 'appliance'),
    (80, 'toaster', 'appliance'), (81, 'sink', 'appliance'),
    (82, 'refrigerator', 'appliance'), (84, 'book', 'indoor'),
    (85, 'clock', 'indoor'), (86, 'vase', 'indoor'),
    (87, 'scissors', 'indoor'), (88, 'teddy bear', 'indoor'),
    (89, 'hair drier', 'indoor'), (90, 'toothbrush', 'indoor'))

# COCO categories that :func:`make_tiny_coco` draws: name -> (shape, colour).
COCO_OBJECTS = {
    'person': ('star', 'red'),
    'car': ('square', 'blue'),
    'dog': ('circle', 'orange'),
    'bottle': ('rhombus', 'green'),
    'kite': ('triangle', 'yellow'),
}


def _coco_image(rng, width, height, max_objects):
    """Draw one image; returns it and a list of (category, polygon)."""
    img = _texture(rng, height, width)
    occupied = np.zeros((height, width), bool)
    objects = []
    names = list(COCO_OBJECTS)
    num_objects = int(rng.integers(1, max_objects + 1))
    min_side = min(width, height)
    for _ in range(20 * num_objects):
        if len(objects) == num_objects:
            break
        name = names[rng.integers(len(names))]
        shape, colour = COCO_OBJECTS[name]
        radius = rng.uniform(0.08, 0.22) * min_side
        polygon = _random_polygon(rng, shape, width, height, radius)
        mask = _polygon_mask(polygon, height, width)
        # Masks stay disjoint (boxes may overlap), so every polygon is
        # exactly the visible object.
        if (cv2.dilate(mask.astype(np.uint8), np.ones((3, 3), np.uint8)) &
                occupied).any():
            continue
        occupied |= mask
        _fill(img, polygon, _jitter(rng, _COLOURS[colour]), antialias=True)
        objects.append((name, polygon))
    return img, objects


def _build_coco(tmp, num_train, num_val, img_size, max_objects, seed):
    width, height = img_size
    cat_ids = {name: cat_id for cat_id, name, _ in COCO_CATEGORIES}
    categories = [
        dict(id=cat_id, name=name, supercategory=supercategory)
        for cat_id, name, supercategory in COCO_CATEGORIES
    ]
    os.makedirs(osp.join(tmp, 'annotations'))
    for split, num_images in (('train', num_train), ('val', num_val)):
        folder = f'{split}2017'
        os.makedirs(osp.join(tmp, folder))
        images, annotations = [], []
        for index in _progress(range(num_images), f'tiny coco {split}'):
            img_id = index + 1
            file_name = f'{img_id:012d}.jpg'
            img, objects = _coco_image(
                _rng(seed, f'coco/{split}', index), width, height, max_objects)
            _write_jpeg(osp.join(tmp, folder, file_name), img)
            images.append(
                dict(
                    id=img_id, file_name=file_name, width=width,
                    height=height))
            for name, polygon in objects:
                polygon = np.round(polygon, 2)
                x0, y0 = polygon.min(axis=0)
                x1, y1 = polygon.max(axis=0)
                annotations.append(
                    dict(
                        id=len(annotations) + 1,
                        image_id=img_id,
                        category_id=cat_ids[name],
                        segmentation=[polygon.ravel().tolist()],
                        area=round(float(_polygon_area(polygon)), 2),
                        bbox=[
                            round(float(v), 2)
                            for v in (x0, y0, x1 - x0, y1 - y0)
                        ],
                        iscrowd=0))
        coco = dict(
            info=dict(
                description=f'mmvitaccel tiny COCO ({split}, seed {seed})',
                version='1.0'),
            licenses=[],
            images=images,
            annotations=annotations,
            categories=categories)
        with open(
                osp.join(tmp, 'annotations', f'instances_{folder}.json'),
                'w',
                encoding='utf-8') as f:
            json.dump(coco, f)


def make_tiny_coco(root,
                   num_train=16,
                   num_val=8,
                   img_size=(160, 128),
                   max_objects=4,
                   seed=0):
    """Generate a tiny COCO 2017 instance segmentation dataset.

    The layout is the one ``mmdet.datasets.CocoDataset`` reads with
    ``data_root=root``, ``ann_file='annotations/instances_train2017.json'``
    and ``data_prefix=dict(img='train2017/')`` (likewise for ``val``)::

        root/
        ├── annotations/
        │   ├── instances_train2017.json
        │   └── instances_val2017.json
        ├── train2017/<image_id:012d>.jpg
        ├── val2017/<image_id:012d>.jpg
        └── .tiny_data.json

    The annotation files list all 80 COCO categories with their official
    (non-contiguous) ids, but objects only belong to the categories of
    :data:`COCO_OBJECTS`, each drawn as its own shape and colour. Every image
    has 1 to ``max_objects`` objects whose masks do not touch (their boxes
    may overlap); segmentations are the exact drawn polygons, ``bbox`` is
    their extent and ``area`` their polygon area.

    Args:
        root (str): Output directory.
        num_train (int): Number of training images.
        num_val (int): Number of validation images.
        img_size (tuple[int, int]): Image ``(width, height)``.
        max_objects (int): Maximum number of objects per image.
        seed (int): Random seed; the same seed gives identical files.

    Returns:
        str: The absolute path of ``root``.
    """
    return _ensure(
        root, 'coco',
        dict(
            num_train=num_train,
            num_val=num_val,
            img_size=list(img_size),
            max_objects=max_objects,
            seed=seed), _build_coco)
