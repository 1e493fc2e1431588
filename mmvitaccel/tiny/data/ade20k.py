"""The tiny ADE20K (SceneParsing 150) semantic segmentation dataset."""
import os
import os.path as osp

import cv2
import numpy as np

from mmvitaccel.tiny.data.common import (_COLOURS, _ensure, _fill, _jitter,
                                         _progress, _random_polygon, _rng,
                                         _write_jpeg)

# ADE20K label values as stored in the PNGs (index in
# ``ADE20KDataset.METAINFO['classes']`` + 1; 0 is "other").
ADE20K_LABELS = {
    'other': 0,
    'wall': 1,
    'building': 2,
    'sky': 3,
    'floor': 4,
    'ceiling': 6,
    'road': 7,
    'grass': 10,
    'person': 13,
    'table': 16,
    'plant': 18,
    'chair': 20,
    'car': 21,
}
# Background layouts, top to bottom band.
_ADE20K_SCENES = (('sky', 'building', 'road'), ('sky', 'wall', 'grass'),
                  ('ceiling', 'wall', 'floor'))
# Band class -> (base RGB colour, texture).
_ADE20K_STUFF = {
    'sky': ((120, 170, 235), 'gradient'),
    'building': ((140, 130, 125), 'grid'),
    'road': ((70, 70, 75), 'noise'),
    'wall': ((215, 200, 170), 'noise'),
    'grass': ((60, 150, 50), 'noise'),
    'ceiling': ((235, 235, 225), 'gradient'),
    'floor': ((150, 100, 60), 'stripes'),
}
# Object class -> (shape, colour).
_ADE20K_THINGS = {
    'person': ('star', 'red'),
    'car': ('square', 'blue'),
    'table': ('hexagon', 'orange'),
    'plant': ('triangle', 'green'),
    'chair': ('cross', 'magenta'),
}


def _stuff_texture(rng, kind, colour, height, width):
    base = np.empty((height, width, 3), np.float32)
    base[:] = _jitter(rng, colour, 15)
    ys, xs = np.mgrid[:height, :width]
    if kind == 'gradient':
        base *= (0.8 + 0.3 * ys / height)[..., None]
    elif kind == 'grid':
        cell = int(rng.integers(8, 14))
        windows = (ys % cell < cell // 2) & (xs % cell < cell // 2)
        base[windows] *= 0.55
    elif kind == 'stripes':
        base[(ys // 4) % 2 == 0] *= 0.8
    base += rng.normal(0, 8, size=base.shape)
    return np.clip(base, 0, 255).astype(np.uint8)


def _ade20k_sample(rng, width, height):
    """Draw one image and its label map (uint8, ADE20K PNG values)."""
    scene = _ADE20K_SCENES[rng.integers(len(_ADE20K_SCENES))]
    xs = np.arange(width)
    # Two wavy horizontal boundaries split the image into three bands.
    bounds = []
    for mean in sorted(rng.uniform(0.2, 0.8, 2) * height):
        amplitude = rng.uniform(0, 0.06) * height
        phase = rng.uniform(0, 2 * np.pi)
        bounds.append(mean + amplitude *
                      np.sin(2 * np.pi * xs / width * rng.uniform(0.5, 2) +
                             phase))
    ys = np.arange(height)[:, None]
    band = (ys >= bounds[0][None]).astype(int) + (ys >= bounds[1][None])
    img = np.empty((height, width, 3), np.uint8)
    label = np.empty((height, width), np.uint8)
    for b, name in enumerate(scene):
        region = band == b
        colour, kind = _ADE20K_STUFF[name]
        img[region] = _stuff_texture(rng, kind, colour, height,
                                     width)[region]
        label[region] = ADE20K_LABELS[name]

    # An unlabelled blob ("other") and a few objects, drawn in order so later
    # ones occlude earlier ones in both the image and the label map.
    min_side = min(width, height)
    clutter = _random_polygon(rng, 'semicircle', width, height,
                              rng.uniform(0.05, 0.12) * min_side)
    _fill(img, clutter, tuple(int(c) for c in rng.integers(0, 256, 3)))
    _fill(label, clutter, ADE20K_LABELS['other'])
    things = list(_ADE20K_THINGS)
    for _ in range(int(rng.integers(1, 5))):
        name = things[rng.integers(len(things))]
        shape, colour = _ADE20K_THINGS[name]
        polygon = _random_polygon(rng, shape, width, height,
                                  rng.uniform(0.08, 0.2) * min_side)
        _fill(img, polygon, _jitter(rng, _COLOURS[colour]))
        _fill(label, polygon, ADE20K_LABELS[name])
    return img, label


def _build_ade20k(tmp, num_train, num_val, img_size, seed):
    width, height = img_size
    for split, prefix, num_images in (('training', 'ADE_train', num_train),
                                      ('validation', 'ADE_val', num_val)):
        img_dir = osp.join(tmp, 'images', split)
        ann_dir = osp.join(tmp, 'annotations', split)
        os.makedirs(img_dir)
        os.makedirs(ann_dir)
        for index in _progress(range(num_images), f'tiny ade20k {split}'):
            img, label = _ade20k_sample(
                _rng(seed, f'ade20k/{split}', index), width, height)
            name = f'{prefix}_{index + 1:08d}'
            _write_jpeg(osp.join(img_dir, name + '.jpg'), img)
            if not cv2.imwrite(osp.join(ann_dir, name + '.png'), label):
                raise OSError(f'cv2 failed to write {name}.png')


def make_tiny_ade20k(root, num_train=8, num_val=4, img_size=(128, 128),
                     seed=0):
    """Generate a tiny ADE20K (SceneParsing 150) semantic segmentation set.

    The layout is the one ``mmseg.datasets.ADE20KDataset`` reads with
    ``data_root=root`` and ``data_prefix=dict(img_path='images/training',
    seg_map_path='annotations/training')`` (likewise ``validation``)::

        root/
        ├── images/
        │   ├── training/ADE_train_<n:08d>.jpg
        │   └── validation/ADE_val_<n:08d>.jpg
        ├── annotations/
        │   ├── training/ADE_train_<n:08d>.png
        │   └── validation/ADE_val_<n:08d>.png
        └── .tiny_data.json

    Label PNGs are single-channel uint8 with ADE20K values
    (:data:`ADE20K_LABELS`): 0 is "other" (ignored after
    ``reduce_zero_label``), 1..150 the classes. Each image has three wavy
    background bands (e.g. sky / building / road) and a few objects drawn as
    shapes of a fixed colour per class, plus an unlabelled blob.

    Args:
        root (str): Output directory.
        num_train (int): Number of training images.
        num_val (int): Number of validation images.
        img_size (tuple[int, int]): Image ``(width, height)``.
        seed (int): Random seed; the same seed gives identical files.

    Returns:
        str: The absolute path of ``root``.
    """
    return _ensure(
        root, 'ade20k',
        dict(
            num_train=num_train,
            num_val=num_val,
            img_size=list(img_size),
            seed=seed), _build_ade20k)
