"""Deterministic tiny datasets in the upstream OpenMMLab on-disk formats.

Every generator draws coloured geometric shapes on a textured background, so
the class, box and mask of each object are known exactly and a model can learn
them in a short CPU run. Each image (or video) is drawn from its own random
generator seeded by ``(seed, split, index)``; the same ``seed`` therefore gives
byte-identical files.

A dataset is built in a temporary sibling directory, completed with a marker
file recording the generator parameters (:data:`MARKER`) and then renamed to
``root``. A call whose ``root`` already holds a marker with the same parameters
returns at once; an interrupted run leaves no marker behind, and a ``root``
generated with other parameters is replaced. A non-empty ``root`` without a
marker is never touched.
"""
import json
import os
import os.path as osp
import shutil
import tempfile
import zlib

import cv2
import numpy as np
from tqdm import tqdm

MARKER = '.tiny_data.json'
FORMAT_VERSION = 1
ENV_ROOT = 'MMVITACCEL_TINY_DATA'


def _regular(n, radii=(1.0, ), phase=0.0):
    angles = phase + np.arange(n * len(radii)) * 2 * np.pi / (n * len(radii))
    r = np.resize(np.asarray(radii), angles.size)
    return np.stack([r * np.cos(angles), r * np.sin(angles)], axis=1)


def _cross(a=0.33):
    return np.array([(-a, -1), (a, -1), (a, -a), (1, -a), (1, a), (a, a),
                     (a, 1), (-a, 1), (-a, a), (-1, a), (-1, -a), (-a, -a)],
                    dtype=np.float64)


def _semicircle():
    angles = np.linspace(0, np.pi, 17)
    centroid = 4 / (3 * np.pi)
    return np.stack([np.cos(angles), np.sin(angles) - centroid], axis=1)


# Unit polygons (radius ~1, centred on the origin) of the drawable shapes.
_UNIT_SHAPES = {
    'circle': _regular(32),
    'square': _regular(4, phase=np.pi / 4) * np.sqrt(2) * 0.8,
    'triangle': _regular(3, phase=-np.pi / 2),
    'star': _regular(5, radii=(1.0, 0.45), phase=-np.pi / 2),
    'cross': _cross(),
    'rhombus': _regular(2, radii=(1.0, 0.5)),
    'hexagon': _regular(6),
    'semicircle': _semicircle(),
}
_SHAPE_NAMES = tuple(_UNIT_SHAPES)

# Named RGB colours, chosen to be far apart.
_COLOURS = {
    'red': (220, 30, 30),
    'green': (30, 180, 40),
    'blue': (30, 60, 220),
    'yellow': (240, 220, 30),
    'cyan': (30, 210, 220),
    'magenta': (210, 40, 200),
    'orange': (250, 130, 20),
    'purple': (110, 40, 160),
    'white': (250, 250, 250),
    'black': (10, 10, 10),
}
_COLOUR_NAMES = tuple(_COLOURS)
_STYLES = ('solid', 'outline', 'striped')

#: Number of distinct classes :func:`make_tiny_imagenet` can draw.
MAX_IMAGENET_CLASSES = len(_SHAPE_NAMES) * len(_COLOURS) * len(_STYLES)

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

#: Motion directions of :func:`make_tiny_kinetics` in label order:
#: name -> (dx, dy).
KINETICS_DIRECTIONS = {
    'moving right': (1, 0),
    'moving left': (-1, 0),
    'moving down': (0, 1),
    'moving up': (0, -1),
    'moving down-right': (1, 1),
    'moving up-left': (-1, -1),
    'moving down-left': (-1, 1),
    'moving up-right': (1, -1),
}


def _rng(seed, tag, index):
    """A generator that depends only on ``seed``, ``tag`` and ``index``."""
    return np.random.default_rng([seed, zlib.crc32(tag.encode()), index])


def _progress(iterable, desc):
    """A tqdm bar that stays silent when stderr is not a terminal."""
    return tqdm(iterable, desc=desc, leave=False, disable=None)


def _write_jpeg(path, rgb):
    """Write an RGB uint8 image as a JPEG file."""
    bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    if not cv2.imwrite(path, bgr, [cv2.IMWRITE_JPEG_QUALITY, 90]):
        raise OSError(f'cv2 failed to write {path}')


def _write_text(path, lines):
    with open(path, 'w', encoding='utf-8') as f:
        f.writelines(line + '\n' for line in lines)


def _jitter(rng, colour, amount=25):
    jittered = np.asarray(colour) + rng.integers(-amount, amount + 1, 3)
    return tuple(int(c) for c in np.clip(jittered, 0, 255))


def _texture(rng, height, width):
    """A smooth random colour field plus Gaussian noise, RGB uint8."""
    coarse = rng.uniform(30, 225, size=(3, 3, 3)).astype(np.float32)
    field = cv2.resize(coarse, (width, height), interpolation=cv2.INTER_CUBIC)
    field += rng.normal(0, 12, size=field.shape).astype(np.float32)
    return np.clip(field, 0, 255).astype(np.uint8)


def _polygon(shape, center, radius, angle):
    """Vertices (N, 2) in pixel coordinates (COCO convention: pixel ``i``
    covers ``[i, i + 1)``)."""
    c, s = np.cos(angle), np.sin(angle)
    rotation = np.array([[c, s], [-s, c]])
    return _UNIT_SHAPES[shape] @ rotation * radius + np.asarray(center)


def _cv2_points(polygon):
    """Polygon as cv2 fixed-point (4 fractional bits) vertices; cv2 puts
    integer coordinates at pixel centres, hence the half-pixel shift."""
    return [np.round((polygon - 0.5) * 16).astype(np.int32)]


def _fill(canvas, polygon, value, antialias=False):
    cv2.fillPoly(
        canvas,
        _cv2_points(polygon),
        value,
        lineType=cv2.LINE_AA if antialias else cv2.LINE_8,
        shift=4)


def _polygon_mask(polygon, height, width):
    mask = np.zeros((height, width), np.uint8)
    _fill(mask, polygon, 1)
    return mask.astype(bool)


def _random_polygon(rng, shape, width, height, radius):
    """A randomly placed and rotated shape that lies inside the image."""
    margin = 1.1 * radius + 1
    center = (rng.uniform(margin, width - margin),
              rng.uniform(margin, height - margin))
    return _polygon(shape, center, radius, rng.uniform(0, 2 * np.pi))


def _polygon_area(polygon):
    x, y = polygon[:, 0], polygon[:, 1]
    return 0.5 * abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))


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


def _kinetics_frames(rng, label, num_frames, width, height):
    """RGB frames (T, H, W, 3) of a shape moving in direction ``label``."""
    dx, dy = list(KINETICS_DIRECTIONS.values())[label]
    norm = np.hypot(dx, dy)
    min_side = min(width, height)
    travel = rng.uniform(0.35, 0.5) * min_side
    step = np.array([dx, dy]) / norm * travel / max(num_frames - 1, 1)
    radius = rng.uniform(0.1, 0.15) * min_side
    margin = 1.1 * radius + 1
    shift = step * (num_frames - 1)
    low = margin - np.minimum(shift, 0)
    high = np.array([width, height]) - margin - np.maximum(shift, 0)
    start = rng.uniform(low, high)
    shape = _SHAPE_NAMES[rng.integers(len(_SHAPE_NAMES))]
    colour = _jitter(rng, _COLOURS[_COLOUR_NAMES[rng.integers(len(_COLOURS))]])
    angle = rng.uniform(0, 2 * np.pi)
    background = _texture(rng, height, width)
    frames = np.repeat(background[None], num_frames, axis=0)
    for t in range(num_frames):
        _fill(frames[t], _polygon(shape, start + t * step, radius, angle),
              colour, antialias=True)
    return frames


def _write_video(path, frames, fps):
    height, width = frames.shape[1:3]
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*'mp4v'), fps,
                             (width, height))
    if not writer.isOpened():
        raise OSError(f'cv2 cannot open an mp4v VideoWriter for {path}')
    for frame in frames:
        writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    writer.release()


def _build_kinetics(tmp, num_classes, num_train_per_class, num_val_per_class,
                    num_frames, img_size, fps, seed):
    width, height = img_size
    for split, per_class in (('train', num_train_per_class),
                             ('val', num_val_per_class)):
        video_dir = osp.join(tmp, f'videos_{split}')
        os.makedirs(video_dir)
        labels = np.repeat(np.arange(num_classes), per_class)
        labels = _rng(seed, f'kinetics/{split}-order', 0).permutation(labels)
        lines = []
        for index, label in enumerate(
                _progress(labels, f'tiny kinetics {split}')):
            name = f'{split}_{index:05d}.mp4'
            frames = _kinetics_frames(
                _rng(seed, f'kinetics/{split}', index), int(label),
                num_frames, width, height)
            _write_video(osp.join(video_dir, name), frames, fps)
            lines.append(f'{name} {label}')
        _write_text(
            osp.join(tmp, f'kinetics400_{split}_list_videos.txt'), lines)


def _read_marker(root):
    try:
        with open(osp.join(root, MARKER), encoding='utf-8') as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _ensure(root, kind, params, build):
    """Return ``root``, building it with ``build(tmp_dir, **params)`` unless
    it already holds a complete dataset with the same parameters."""
    root = osp.abspath(root)
    # Round-trip through JSON so tuples compare equal to stored lists.
    marker = json.loads(
        json.dumps(
            dict(kind=kind, format_version=FORMAT_VERSION, params=params)))
    existing = _read_marker(root)
    if existing == marker:
        return root
    if existing is None and osp.isdir(root) and os.listdir(root):
        raise FileExistsError(
            f'{root} is not empty and holds no {MARKER}; refusing to '
            'overwrite it with a tiny dataset')
    parent = osp.dirname(root)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f'.{osp.basename(root)}.tmp-', dir=parent)
    trash = None
    try:
        build(tmp, **params)
        with open(osp.join(tmp, MARKER), 'w', encoding='utf-8') as f:
            json.dump(marker, f, indent=2, sort_keys=True)
        os.chmod(tmp, 0o755)  # mkdtemp makes it private
        if osp.isdir(root):
            trash = tempfile.mkdtemp(
                prefix=f'.{osp.basename(root)}.old-', dir=parent)
            os.rename(root, osp.join(trash, 'old'))
        try:
            os.rename(tmp, root)
        except OSError:
            # Another process finished the same dataset first.
            if _read_marker(root) != marker:
                raise
    finally:
        for path in (tmp, trash):
            if path is not None and osp.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
    return root


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


def make_tiny_kinetics(root,
                       num_classes=4,
                       num_train_per_class=4,
                       num_val_per_class=2,
                       num_frames=16,
                       img_size=(64, 64),
                       fps=8,
                       seed=0):
    """Generate a tiny Kinetics-400 style video recognition dataset.

    The layout is the one ``mmaction.datasets.VideoDataset`` reads with
    ``ann_file=root/kinetics400_train_list_videos.txt`` and
    ``data_prefix=dict(video=root/videos_train)`` (likewise ``val``)::

        root/
        ├── kinetics400_train_list_videos.txt   # "train_00000.mp4 <label>"
        ├── kinetics400_val_list_videos.txt     # "val_00000.mp4 <label>"
        ├── videos_train/train_<n:05d>.mp4
        ├── videos_val/val_<n:05d>.mp4
        └── .tiny_data.json

    Each video shows one shape (random type and colour, on a static textured
    background) moving in a straight line; the label is the direction, in the
    order of :data:`KINETICS_DIRECTIONS`, so it can only be learnt from the
    temporal dimension. Videos are MPEG-4 Part 2 (``mp4v``) written by
    OpenCV, which ``decord`` (``DecordInit``/``DecordDecode``) decodes.

    Args:
        root (str): Output directory.
        num_classes (int): Number of motion directions, 1..8.
        num_train_per_class (int): Training videos per class.
        num_val_per_class (int): Validation videos per class.
        num_frames (int): Frames per video.
        img_size (tuple[int, int]): Frame ``(width, height)``; even sizes
            are safest for video codecs.
        fps (int): Frame rate stored in the files.
        seed (int): Random seed; the same seed gives identical files.

    Returns:
        str: The absolute path of ``root``.
    """
    if not 1 <= num_classes <= len(KINETICS_DIRECTIONS):
        raise ValueError('num_classes must be in '
                         f'1..{len(KINETICS_DIRECTIONS)}, got {num_classes}')
    return _ensure(
        root, 'kinetics',
        dict(
            num_classes=num_classes,
            num_train_per_class=num_train_per_class,
            num_val_per_class=num_val_per_class,
            num_frames=num_frames,
            img_size=list(img_size),
            fps=fps,
            seed=seed), _build_kinetics)


#: Dataset kinds: name -> (generator, keyword arguments).
TINY_DATA_KINDS = {
    'imagenet': (make_tiny_imagenet, {}),
    'tinyimagenet': (make_tiny_imagenet,
                     dict(
                         num_classes=200,
                         num_train_per_class=8,
                         num_val_per_class=2,
                         img_size=64)),
    'coco': (make_tiny_coco, {}),
    'ade20k': (make_tiny_ade20k, {}),
    'kinetics': (make_tiny_kinetics, {}),
}


def make_tiny_data(kind, root, seed=0):
    """Generate the tiny dataset of one kind with its default sizes.

    Args:
        kind (str): One of :data:`TINY_DATA_KINDS`: ``'imagenet'``,
            ``'tinyimagenet'`` (200 classes of 64x64 images), ``'coco'``,
            ``'ade20k'`` or ``'kinetics'``.
        root (str): Output directory of this dataset.
        seed (int): Random seed.

    Returns:
        str: The absolute path of ``root``.
    """
    if kind not in TINY_DATA_KINDS:
        raise KeyError(f'unknown tiny dataset kind {kind!r}; expected one of '
                       f'{sorted(TINY_DATA_KINDS)}')
    make, kwargs = TINY_DATA_KINDS[kind]
    return make(root, seed=seed, **kwargs)


def default_tiny_data_dir():
    """The parent directory of the tiny datasets.

    Returns:
        str: The ``MMVITACCEL_TINY_DATA`` environment variable if set, else
        ``<cwd>/data/tiny``.
    """
    return os.environ.get(ENV_ROOT) or osp.join(os.getcwd(), 'data', 'tiny')


def tiny_data_root(kind, root=None):
    """Return the path of a ready tiny dataset, generating it if needed.

    The dataset lives in ``<root>/<kind>``. A complete dataset already
    there is used as it is, whatever seed and sizes it was made
    with (e.g. by ``tools/data/make_tiny_data.py --seed 3``); otherwise it
    is generated with seed 0 and the default sizes of
    :func:`make_tiny_data`.

    Args:
        kind (str): One of :data:`TINY_DATA_KINDS`.
        root (str, optional): Parent directory of the tiny datasets.
            Defaults to :func:`default_tiny_data_dir`.

    Returns:
        str: The absolute dataset directory.
    """
    if root is None:
        root = default_tiny_data_dir()
    path = osp.abspath(osp.join(root, kind))
    marker = _read_marker(path)
    if marker is not None and marker.get('format_version') == FORMAT_VERSION:
        return path  # complete (the marker is written last)
    return make_tiny_data(kind, path)
