"""The tiny ImageNet-1k style classification dataset."""
import os
import os.path as osp

import cv2
import numpy as np

from mmvitaccel.tiny.data.common import (_COLOUR_NAMES, _COLOURS, _SHAPE_NAMES,
                                         _cv2_points, _ensure, _fill, _jitter,
                                         _polygon_mask, _progress,
                                         _random_polygon, _rng, _texture,
                                         _write_jpeg, _write_text)

_STYLES = ('solid', 'outline', 'striped')

#: Number of distinct classes :func:`make_tiny_imagenet` can draw.
MAX_IMAGENET_CLASSES = len(_SHAPE_NAMES) * len(_COLOURS) * len(_STYLES)


def _imagenet_class(label):
    """(shape, colour, style) of an ImageNet-like class.

    Consecutive labels differ in both shape and colour, so the first classes
    are easy to tell apart; the style only changes every 80 classes.
    """
    num_shapes, num_colours = len(_SHAPE_NAMES), len(_COLOURS)
    style, pair = divmod(label, num_shapes * num_colours)
    shape = pair % num_shapes
    colour = (pair // num_shapes + shape) % num_colours
    return _SHAPE_NAMES[shape], _COLOUR_NAMES[colour], _STYLES[style]


def _imagenet_image(rng, label, size):
    shape, colour, style = _imagenet_class(label)
    img = _texture(rng, size, size)
    radius = rng.uniform(0.22, 0.4) * size
    polygon = _random_polygon(rng, shape, size, size, radius)
    rgb = _jitter(rng, _COLOURS[colour])
    if style == 'outline':
        thickness = max(2, int(round(radius * 0.25)))
        cv2.polylines(
            img,
            _cv2_points(polygon),
            True,
            rgb,
            thickness=thickness,
            lineType=cv2.LINE_AA,
            shift=4)
        return img
    _fill(img, polygon, rgb, antialias=True)
    if style == 'striped':
        mask = _polygon_mask(polygon, size, size)
        theta = rng.uniform(0, np.pi)
        stripe_width = max(2.0, radius / 4)
        ys, xs = np.mgrid[:size, :size]
        stripes = (xs * np.cos(theta) + ys * np.sin(theta)) // stripe_width
        stripes = stripes % 2 == 0
        img[mask & stripes] = (np.asarray(rgb) * 0.35).astype(np.uint8)
    return img


def _imagenet_folder(label):
    shape, colour, style = _imagenet_class(label)
    return f'{label:04d}_{colour}_{style}_{shape}'


def _build_imagenet(tmp, num_classes, num_train_per_class, num_val_per_class,
                    img_size, seed):
    os.makedirs(osp.join(tmp, 'meta'))
    train_lines = []
    for label in _progress(range(num_classes), 'tiny imagenet train'):
        folder = _imagenet_folder(label)
        os.makedirs(osp.join(tmp, 'train', folder))
        for i in range(num_train_per_class):
            name = f'{folder}/{folder}_{i:04d}.JPEG'
            rng = _rng(seed, 'imagenet/train', label * num_train_per_class + i)
            _write_jpeg(
                osp.join(tmp, 'train', name),
                _imagenet_image(rng, label, img_size))
            train_lines.append(f'{name} {label}')
    _write_text(osp.join(tmp, 'meta', 'train.txt'), train_lines)

    # Like ImageNet, the validation images are flat and in random class order.
    val_labels = np.repeat(np.arange(num_classes), num_val_per_class)
    val_labels = _rng(seed, 'imagenet/val-order', 0).permutation(val_labels)
    os.makedirs(osp.join(tmp, 'val'))
    val_lines = []
    for i, label in enumerate(_progress(val_labels, 'tiny imagenet val')):
        name = f'ILSVRC2012_val_{i + 1:08d}.JPEG'
        rng = _rng(seed, 'imagenet/val', i)
        _write_jpeg(
            osp.join(tmp, 'val', name), _imagenet_image(rng, int(label),
                                                        img_size))
        val_lines.append(f'{name} {label}')
    _write_text(osp.join(tmp, 'meta', 'val.txt'), val_lines)


def make_tiny_imagenet(root,
                       num_classes=10,
                       num_train_per_class=8,
                       num_val_per_class=4,
                       img_size=64,
                       seed=0):
    """Generate a tiny ImageNet-1k style classification dataset.

    The layout is the one ``mmpretrain.datasets.ImageNet`` reads with
    ``data_root=root, split='train'|'val'`` (annotation paths are relative
    to the split folder)::

        root/
        ├── meta/
        │   ├── train.txt   # "<class_folder>/<class_folder>_0000.JPEG <label>"
        │   └── val.txt     # "ILSVRC2012_val_00000001.JPEG <label>"
        ├── train/
        │   └── <class_folder>/<class_folder>_<i>.JPEG
        ├── val/
        │   └── ILSVRC2012_val_<n>.JPEG
        └── .tiny_data.json

    Class ``label`` (``0..num_classes-1``, so the 1000-class ImageNet
    metainfo still applies) is one combination of shape, colour and fill
    style; ``<class_folder>`` is ``<label:04d>_<colour>_<style>_<shape>`` and
    sorts in label order. ``num_classes=200, img_size=64`` gives a
    Tiny-ImageNet shaped set.

    Args:
        root (str): Output directory.
        num_classes (int): Number of classes, at most
            :data:`MAX_IMAGENET_CLASSES` (240).
        num_train_per_class (int): Training images per class.
        num_val_per_class (int): Validation images per class.
        img_size (int): Side of the square images.
        seed (int): Random seed; the same seed gives identical files.

    Returns:
        str: The absolute path of ``root``.
    """
    if not 1 <= num_classes <= MAX_IMAGENET_CLASSES:
        raise ValueError(f'num_classes must be in 1..{MAX_IMAGENET_CLASSES}, '
                         f'got {num_classes}')
    return _ensure(
        root, 'imagenet',
        dict(
            num_classes=num_classes,
            num_train_per_class=num_train_per_class,
            num_val_per_class=num_val_per_class,
            img_size=img_size,
            seed=seed), _build_imagenet)
