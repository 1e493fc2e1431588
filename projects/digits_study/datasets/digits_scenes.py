"""Real handwritten digits, several per canvas, with instance and semantic
labels: the dense-prediction study's data (detection, instance and semantic
segmentation).

The scans are scikit-learn's (see :mod:`.digits_canvas`, whose splits and
drawing conventions this module shares): splits are by scan, stratified by
label, so that no scan of the test split is seen in training. A scene is a
pure function of ``(canvas_seed, split, epoch, index)``: validation and test
scenes are drawn once (epoch 0), training scenes are new every epoch when
read through :class:`~.digits_canvas.EpochSampler`.

A scene (:func:`render_scene`) places ``num_digits`` digits, each resized,
rotated a little and put at a uniform position whose box overlaps every
earlier digit's box by an IoU of at most ``max_overlap``; later digits are
drawn over earlier ones. An instance's mask is its visible ink (the warped
scan above ``ink``, less what later digits cover), its box the tight box of
that mask; a digit left with fewer than ``min_ink`` visible pixels is drawn
elsewhere. Fragments of other scans of the split are then drawn where no
digit's box is, as clutter (no label), and Gaussian noise covers all.

Two registered datasets read the same scenes:

* :class:`DigitsInstances`: mmdet's data items (COCO conventions: 10
  categories, ``bbox`` as ``x0, y0, x1, y1``, masks as COCO RLE), for
  mmdet's ``LoadAnnotations`` and ``PackDetInputs``; :meth:`~DigitsInstances.
  to_coco` writes a split as a COCO json for ``CocoMetric``;
* :class:`DigitsSegmentation`: mmseg's items, ``gt_seg_map`` with label 0
  for background and ``1 + digit`` for ink, from the same masks.
"""
import json

import numpy as np

from mmvitaccel.registry import DATASETS
from projects.digits_study.datasets.digits_canvas import (_SPLIT_CODE, SPLITS,
                                                          EpochDrawnDataset,
                                                          _load_digits, _warp,
                                                          check_drawing,
                                                          digits_splits,
                                                          draw_fragments)

__all__ = ['DigitsInstances', 'DigitsScenes', 'DigitsSegmentation',
           'render_scene', 'SCENE_DIGIT_TRIES']

#: positions (and scans) tried per digit before the scene has one fewer
SCENE_DIGIT_TRIES = 20


def _box_iou(a, b):
    """IoU of two ``(x0, y0, x1, y1)`` boxes."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.
    inter = w * h
    area = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1])
    return inter / (area - inter)


def render_scene(rng, scans, labels, canvas_size=128, num_digits=(3, 6),
                 scale=(0.16, 0.34), max_angle=12., max_overlap=0.2,
                 num_fragments=4, fragment_size=(3, 4), noise=0.1, ink=0.3,
                 min_ink=12):
    """Draw one scene.

    Args:
        rng (np.random.Generator): the scene's generator.
        scans (np.ndarray): ``(n, 8, 8)`` in ``[0, 1]``, the split's scans.
        labels (np.ndarray): ``(n, )`` their digits.
        canvas_size (int): the canvas side in pixels.
        num_digits (tuple[int, int]): the range of digits per scene.
        scale (tuple[float, float]): a digit's side as a share of the
            canvas's.
        max_angle (float): the largest rotation, degrees.
        max_overlap (float): the largest IoU of a digit's drawn square with
            an earlier one's.
        num_fragments (int): unlabelled crops of other scans.
        fragment_size (tuple[int, int]): their side range in scan pixels.
        noise (float): the noise's standard deviation.
        ink (float): the intensity above which a warped scan's pixel is ink.
        min_ink (int): the fewest visible ink pixels a digit must keep.

    Returns:
        tuple: the ``(H, W, 3)`` uint8 canvas (grey), the ``(k, )`` digit
        labels, the ``(k, 4)`` float boxes ``(x0, y0, x1, y1)`` (exclusive
        ends) and the ``(k, H, W)`` bool visible masks, in drawing order.
    """
    size = canvas_size
    canvas = np.zeros((size, size), np.float32)
    owner = np.full((size, size), -1, np.int64)  # which digit's ink
    squares, digit_labels = [], []
    count = int(rng.integers(num_digits[0], num_digits[1] + 1))
    for _ in range(count):
        for _ in range(SCENE_DIGIT_TRIES):
            pick = int(rng.integers(len(scans)))
            side = int(round(rng.uniform(*scale) * size))
            side = min(max(side, 8), size)
            glyph = _warp(scans[pick], side, rng.uniform(-max_angle,
                                                         max_angle))
            y0, x0 = (int(v) for v in rng.integers(0, size - side + 1,
                                                   size=2))
            square = (x0, y0, x0 + side, y0 + side)
            if any(_box_iou(square, s) > max_overlap for s in squares):
                continue
            mine = glyph > ink
            if mine.sum() < min_ink:
                continue
            # drawn over the earlier digits: they lose what it covers
            region = owner[y0:y0 + side, x0:x0 + side]
            hidden = np.bincount(region[mine][region[mine] >= 0],
                                 minlength=len(squares))
            visible = [(owner == j).sum() - hidden[j]
                       for j in range(len(squares))]
            if any(v < min_ink for v in visible):
                continue
            canvas[y0:y0 + side, x0:x0 + side] = np.where(
                mine, glyph, canvas[y0:y0 + side, x0:x0 + side])
            region[mine] = len(squares)
            squares.append(square)
            digit_labels.append(int(labels[pick]))
            break
    # where no digit is, each at a digit's scale of its own
    draw_fragments(rng, canvas, scans, num_fragments, fragment_size,
                   lambda k: k * rng.uniform(*scale) * size / 8., squares)
    canvas += rng.normal(0., noise, canvas.shape).astype(np.float32)
    img = (np.clip(canvas, 0., 1.) * 255. + 0.5).astype(np.uint8)
    masks = np.stack([owner == j for j in range(len(squares))]) if \
        squares else np.zeros((0, size, size), bool)
    boxes = np.zeros((len(squares), 4), np.float32)
    for j, mask in enumerate(masks):
        ys, xs = np.nonzero(mask)
        boxes[j] = (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
    return (np.repeat(img[..., None], 3, axis=2),
            np.asarray(digit_labels, np.int64), boxes, masks)


class DigitsScenes(EpochDrawnDataset):
    """Scenes of several real digits (:func:`render_scene`), by split.

    ``dataset[i]`` is scene ``i`` of epoch 0, ``dataset[(epoch, i)]`` (what
    :class:`~.digits_canvas.EpochSampler` asks for) that of ``epoch``; with
    ``redraw=False`` (validation, test) the epoch is ignored.

    Args:
        split (str): ``'train'``, ``'val'`` or ``'test'``.
        num_scenes (int, optional): scenes per epoch; default the split's
            scan count.
        canvas_size, num_digits, scale, max_angle, max_overlap,
            num_fragments, fragment_size, noise, ink, min_ink: see
            :func:`render_scene`.
        split_seed (int): the seed of the stratified splits.
        canvas_seed (int): the seed of the scenes.
        ratios (tuple[float, float, float]): train/val/test shares.
        redraw (bool, optional): new scenes per epoch; default: True for
            ``'train'`` only.
        pipeline (list): the transforms.
        **kwargs: other arguments of mmengine's ``BaseDataset``.
    """

    def __init__(self,
                 split='train',
                 num_scenes=None,
                 canvas_size=128,
                 num_digits=(3, 6),
                 scale=(0.16, 0.34),
                 max_angle=12.,
                 max_overlap=0.2,
                 num_fragments=4,
                 fragment_size=(3, 4),
                 noise=0.1,
                 ink=0.3,
                 min_ink=12,
                 split_seed=0,
                 canvas_seed=0,
                 ratios=(0.6, 0.2, 0.2),
                 redraw=None,
                 pipeline=(),
                 **kwargs):
        if split not in SPLITS:
            raise ValueError(f'split must be one of {SPLITS}, got {split!r}')
        if not isinstance(canvas_size, int) or canvas_size < 16:
            raise ValueError('canvas_size must be an int >= 16, got '
                             f'{canvas_size!r}')
        if not 1 <= num_digits[0] <= num_digits[1]:
            raise ValueError('num_digits must be (low, high) with 1 <= low '
                             f'<= high, got {num_digits}')
        check_drawing(scale, fragment_size, num_fragments, noise)
        if not 0 <= max_overlap < 1:
            raise ValueError(f'max_overlap must be in [0, 1), got '
                             f'{max_overlap}')
        if not 0 < ink < 1 or min_ink < 1:
            raise ValueError('ink must be in (0, 1) and min_ink >= 1, got '
                             f'{ink}, {min_ink}')
        self.split = split
        self.draw_args = dict(
            canvas_size=canvas_size, num_digits=tuple(num_digits),
            scale=tuple(scale), max_angle=float(max_angle),
            max_overlap=float(max_overlap), num_fragments=int(num_fragments),
            fragment_size=tuple(fragment_size), noise=float(noise),
            ink=float(ink), min_ink=int(min_ink))
        self.canvas_seed = canvas_seed
        self.redraw = split == 'train' if redraw is None else bool(redraw)
        images, labels = _load_digits()
        index = digits_splits(tuple(ratios), split_seed, labels)[split]
        self._scans, self._labels = images[index], labels[index]
        self.num_scenes = len(index) if num_scenes is None else \
            int(num_scenes)
        if self.num_scenes < 1:
            raise ValueError(f'num_scenes must be >= 1, got {num_scenes}')
        kwargs.setdefault('serialize_data', False)
        super().__init__(pipeline=list(pipeline), **kwargs)

    def load_data_list(self):
        """One entry per scene: its index (the scene is drawn on access)."""
        return [dict(sample_idx=i, img_id=i) for i in range(self.num_scenes)]

    def scene(self, idx, epoch=0):
        """Scene ``idx`` of ``epoch`` (ignored unless ``redraw``):
        :func:`render_scene`'s canvas, labels, boxes and masks."""
        epoch = int(epoch) if self.redraw else 0
        rng = np.random.default_rng(
            [self.canvas_seed, _SPLIT_CODE[self.split], epoch, int(idx)])
        return render_scene(rng, self._scans, self._labels, **self.draw_args)

    def labelled(self, info, labels, boxes, masks):
        """Add the scene's annotations to a data info: here as arrays,
        ``gt_labels`` ``(k, )``, ``gt_boxes`` ``(k, 4)`` and ``gt_masks``
        ``(k, H, W)`` bool; the task datasets give them their toolbox's
        form instead."""
        info.update(gt_labels=labels, gt_boxes=boxes, gt_masks=masks)
        return info

    def get_data_info(self, idx, epoch=0):
        """The scene's info with its canvas drawn and annotated."""
        info = dict(super().get_data_info(idx))
        img, labels, boxes, masks = self.scene(idx, epoch)
        h, w = img.shape[:2]
        info.update(img=img, img_path=None, img_shape=(h, w),
                    ori_shape=(h, w), height=h, width=w,
                    epoch=epoch if self.redraw else 0)
        return self.labelled(info, labels, boxes, masks)


def _rle(mask):
    """COCO's compressed RLE of a bool mask, ``counts`` as a string (as a
    COCO json holds it, and as mmdet's ``LoadAnnotations`` requires)."""
    from pycocotools import mask as mask_utils
    rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    rle['counts'] = rle['counts'].decode()
    return rle


@DATASETS.register_module()
class DigitsInstances(DigitsScenes):
    """Digit scenes as mmdet instances (10 categories, boxes and masks).

    Each item follows mmdet's COCO data items: ``instances`` of
    ``dict(bbox=[x0, y0, x1, y1], bbox_label, ignore_flag=0, mask=RLE)``,
    for mmdet's ``LoadAnnotations(with_bbox=True, with_mask=True)``; the
    canvas is ``img`` already (no ``LoadImageFromFile``).

    Args:
        **kwargs: see :class:`DigitsScenes`.
    """

    METAINFO = dict(classes=tuple(str(i) for i in range(10)),
                    palette=[(220, 20, 60), (119, 11, 32), (0, 0, 142),
                             (0, 0, 230), (106, 0, 228), (0, 60, 100),
                             (0, 80, 100), (0, 0, 70), (0, 0, 192),
                             (250, 170, 30)])

    def labelled(self, info, labels, boxes, masks):
        info['instances'] = [
            dict(bbox=[float(v) for v in box], bbox_label=int(label),
                 ignore_flag=0, mask=_rle(mask))
            for label, box, mask in zip(labels, boxes, masks)
        ]
        return info

    def to_coco(self, path, epoch=0):
        """Write the split's scenes (of ``epoch``) as a COCO json: images
        ``id`` = scene index, boxes ``x, y, w, h``, masks as RLE, areas of
        the masks, categories 0..9 named by digit.

        Args:
            path (str): the json to write.
            epoch (int): the epoch of training scenes.

        Returns:
            str: ``path``.
        """
        images, annotations = [], []
        for i in range(self.num_scenes):
            img, labels, boxes, masks = self.scene(i, epoch)
            h, w = img.shape[:2]
            images.append(dict(id=i, file_name=f'{self.split}/{i}.png',
                               height=h, width=w))
            for label, box, mask in zip(labels, boxes, masks):
                rle = _rle(mask)
                x0, y0, x1, y1 = (float(v) for v in box)
                annotations.append(dict(
                    id=len(annotations) + 1, image_id=i,
                    category_id=int(label), bbox=[x0, y0, x1 - x0, y1 - y0],
                    area=float(mask.sum()), segmentation=rle, iscrowd=0))
        categories = [dict(id=i, name=name) for i, name in enumerate(
            self.METAINFO['classes'])]
        with open(path, 'w') as f:
            json.dump(dict(images=images, annotations=annotations,
                           categories=categories), f)
        return path


@DATASETS.register_module()
class DigitsSegmentation(DigitsScenes):
    """Digit scenes as mmseg samples: ``gt_seg_map`` ``(H, W)`` uint8, 0
    for background and ``1 + digit`` where a digit's visible ink is (the
    instance masks of :class:`DigitsInstances`'s same scene).

    Args:
        **kwargs: see :class:`DigitsScenes`.
    """

    METAINFO = dict(
        classes=('background', ) + tuple(str(i) for i in range(10)),
        palette=[(0, 0, 0)] + [(25 * i, 255 - 25 * i, 128)
                               for i in range(10)])

    def labelled(self, info, labels, boxes, masks):
        seg = np.zeros(info['img_shape'], np.uint8)
        for label, mask in zip(labels, masks):
            seg[mask] = 1 + label
        info.update(gt_seg_map=seg, seg_fields=['gt_seg_map'],
                    reduce_zero_label=False, seg_map_path=None)
        return info
