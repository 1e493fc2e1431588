"""What the tiny dataset generators share: drawing, writing and the marker.

Every generator draws coloured geometric shapes on a textured background, so
the class, box and mask of each object are known exactly and a model can learn
them in a short CPU run. Each image (or video) is drawn from its own random
generator seeded by ``(seed, split, index)``; the same ``seed`` therefore gives
byte-identical files.

A dataset is built in a temporary sibling directory, completed with a marker
file recording the generator parameters (:data:`MARKER`) and then renamed to
``root`` (:func:`_ensure`). A call whose ``root`` already holds a marker with
the same parameters returns at once; an interrupted run leaves no marker
behind, and a ``root`` generated with other parameters is replaced. A
non-empty ``root`` without a marker is never touched.

The names with a leading underscore are internal to
:mod:`mmvitaccel.tiny.data`: the dataset modules import them from here.
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


def _read_marker(root):
    """The parameters recorded in a dataset folder's :data:`MARKER`.

    Args:
        root (str): A dataset folder.

    Returns:
        dict | None: The marker's content, or None when the folder has no
        readable marker (not generated, or interrupted before the end).
    """
    try:
        with open(osp.join(root, MARKER), encoding='utf-8') as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _ensure(root, kind, params, build):
    """Return ``root``, building it with ``build(tmp_dir, **params)`` unless
    it already holds a complete dataset with the same parameters.

    Args:
        root (str): The dataset folder.
        kind (str): The dataset kind recorded in the marker.
        params (dict): The generator's parameters, recorded in the marker
            and passed to ``build``.
        build (Callable): Writes the dataset into an empty folder, called as
            ``build(tmp_dir, **params)``.

    Returns:
        str: The absolute path of ``root``.

    Raises:
        FileExistsError: If ``root`` is not empty and holds no marker.
    """
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
