"""Clips of a real handwritten digit moving over a cluttered canvas: the
video part of the dense-prediction study (``docs/study.md``).

The scans, splits and drawing conventions are :mod:`.digits_canvas`'s:
splits are by scan, stratified by label, and a clip is a pure function of
``(canvas_seed, split, epoch, index)`` (validation and test clips are drawn
once, training clips anew every epoch through
:class:`~.digits_canvas.EpochSampler`).

A clip (:func:`render_clip`) shows one digit, resized and rotated a little
as on :class:`~.digits_canvas.DigitsCanvas`, that moves in a straight line
at constant speed over ``travel`` of the canvas side, in one of
``num_directions`` directions, over static clutter (fragments of other
scans of the split, placed off the digit's path) and new noise in every
frame. The label is the digit (``label='digit'``) or the direction of its
motion (``label='direction'``, which no single frame shows).
"""
import math

import numpy as np

from mmvitaccel.registry import DATASETS
from projects.digits_study.datasets.digits_canvas import (_SPLIT_CODE, SPLITS,
                                                          EpochDrawnDataset,
                                                          _load_digits, _warp,
                                                          check_drawing,
                                                          digits_splits,
                                                          draw_fragments)

__all__ = ['DigitsClips', 'render_clip', 'CLIP_LABELS']

#: what a clip's label is
CLIP_LABELS = ('digit', 'direction')


def render_clip(rng, digit, fragments_from, canvas_size=160, num_frames=8,
                scale=(0.16, 0.34), max_angle=12., travel=0.3,
                direction=0, num_directions=8, num_fragments=4,
                fragment_size=(3, 4), noise=0.1):
    """Draw one clip.

    The digit (8x8) becomes a glyph of ``s = round(u * canvas_size)`` px,
    ``u ~ U(scale)``, rotated by ``~U(-max_angle, max_angle)`` degrees, as
    :func:`~.digits_canvas.render_canvas` draws it. Its top-left corner in
    frame ``t`` is ``p_0 + t / (T - 1) * d * (cos a, sin a)`` rounded to
    pixels, with ``d = travel * canvas_size``, ``a = 2 pi direction /
    num_directions`` (0: rightwards, counter-clockwise on the screen) and
    ``p_0`` uniform among the starts whose whole path stays inside the
    canvas. Fragments (as on the canvas, enlarged by the glyph's factor
    ``s / 8``) are placed off the box the path sweeps and stay for the
    whole clip; every frame gets its own ``N(0, noise^2)`` noise.

    Args:
        rng (np.random.Generator): the clip's generator.
        digit (np.ndarray): ``(8, 8)`` in ``[0, 1]``.
        fragments_from (np.ndarray): ``(n, 8, 8)`` scans to crop from.
        canvas_size (int): the canvas side in pixels.
        num_frames (int): ``T``.
        scale, max_angle, num_fragments, fragment_size, noise: as for
            :func:`~.digits_canvas.render_canvas`.
        travel (float): the path's length as a share of the canvas side.
        direction (int): the direction's index in ``[0, num_directions)``.
        num_directions (int): directions evenly around the circle.

    Returns:
        tuple[list[np.ndarray], list[tuple]]: ``T`` frames ``(H, W, 3)``
        uint8 (grey) and the digit's box ``(x0, y0, x1, y1)`` in each.
    """
    side = int(round(rng.uniform(*scale) * canvas_size))
    side = min(max(side, 8), canvas_size)
    factor = side / 8.
    glyph = _warp(digit, side, rng.uniform(-max_angle, max_angle))
    angle = 2 * math.pi * direction / num_directions
    dx = travel * canvas_size * math.cos(angle)
    dy = -travel * canvas_size * math.sin(angle)  # image rows grow down
    room = canvas_size - side
    # starts that keep the whole path inside: x0 + min(0, dx) >= 0 and
    # x0 + max(0, dx) <= room (likewise y)
    lows = (math.ceil(-min(0., dx)), math.ceil(-min(0., dy)))
    highs = (math.floor(room - max(0., dx)), math.floor(room - max(0., dy)))
    if highs[0] < lows[0] or highs[1] < lows[1]:
        raise ValueError(f'travel {travel} leaves no room for a {side} px '
                         f'digit on a {canvas_size} px canvas')
    x_start = int(rng.integers(lows[0], highs[0] + 1))
    y_start = int(rng.integers(lows[1], highs[1] + 1))
    steps = [t / max(num_frames - 1, 1) for t in range(num_frames)]
    corners = [(int(round(x_start + s * dx)), int(round(y_start + s * dy)))
               for s in steps]
    swept = (min(x for x, _ in corners), min(y for _, y in corners),
             max(x for x, _ in corners) + side,
             max(y for _, y in corners) + side)
    background = np.zeros((canvas_size, canvas_size), np.float32)
    draw_fragments(rng, background, fragments_from, num_fragments,
                   fragment_size, lambda k: k * factor, [swept])
    frames, boxes = [], []
    for x0, y0 in corners:
        frame = background.copy()
        region = frame[y0:y0 + side, x0:x0 + side]
        np.maximum(region, glyph, out=region)
        frame += rng.normal(0., noise, frame.shape).astype(np.float32)
        img = (np.clip(frame, 0., 1.) * 255. + 0.5).astype(np.uint8)
        frames.append(np.repeat(img[..., None], 3, axis=2))
        boxes.append((x0, y0, x0 + side, y0 + side))
    return frames, boxes


@DATASETS.register_module()
class DigitsClips(EpochDrawnDataset):
    """Clips of a moving real digit (:func:`render_clip`), by split, as
    mmaction2's recognizers read them.

    Each item is ``dict(imgs=[T x (H, W, 3) uint8], label=int,
    num_clips=1, clip_len=T, modality='RGB', ...)`` passed through
    ``pipeline`` (e.g. ``FormatShape(input_format='NCTHW')`` and
    ``PackActionInputs``). Item ``i`` shows scan ``i % num_scans`` of the
    split moving in a direction drawn uniformly with the rest of the clip;
    ``dataset[i]`` is the clip of epoch 0, ``dataset[(epoch, i)]`` that of
    ``epoch``.

    Args:
        split (str): ``'train'``, ``'val'`` or ``'test'``.
        label (str): one of :data:`CLIP_LABELS`.
        num_scenes (int, optional): clips per epoch; default the split's
            scan count (the scene datasets' name, so that one option sizes
            every task of the dense study).
        canvas_size, num_frames, scale, max_angle, travel, num_directions,
            num_fragments, fragment_size, noise: see :func:`render_clip`.
        split_seed (int): the seed of the stratified splits.
        canvas_seed (int): the seed of the clips.
        ratios (tuple[float, float, float]): train/val/test shares.
        redraw (bool, optional): new clips per epoch; default: True for
            ``'train'`` only.
        pipeline (list): the transforms.
        **kwargs: other arguments of mmengine's ``BaseDataset``.
    """

    def __init__(self,
                 split='train',
                 label='digit',
                 num_scenes=None,
                 canvas_size=160,
                 num_frames=8,
                 scale=(0.16, 0.34),
                 max_angle=12.,
                 travel=0.3,
                 num_directions=8,
                 num_fragments=4,
                 fragment_size=(3, 4),
                 noise=0.1,
                 split_seed=0,
                 canvas_seed=0,
                 ratios=(0.6, 0.2, 0.2),
                 redraw=None,
                 pipeline=(),
                 **kwargs):
        if split not in SPLITS:
            raise ValueError(f'split must be one of {SPLITS}, got {split!r}')
        if label not in CLIP_LABELS:
            raise ValueError(f'label must be one of {CLIP_LABELS}, got '
                             f'{label!r}')
        if not isinstance(canvas_size, int) or canvas_size < 16:
            raise ValueError('canvas_size must be an int >= 16, got '
                             f'{canvas_size!r}')
        if not isinstance(num_frames, int) or num_frames < 2:
            raise ValueError(f'num_frames must be an int >= 2, got '
                             f'{num_frames!r}')
        if not isinstance(num_directions, int) or num_directions < 2:
            raise ValueError('num_directions must be an int >= 2, got '
                             f'{num_directions!r}')
        if not 0 < travel < 1 - scale[1]:
            raise ValueError(f'travel must be in (0, 1 - scale[1]) = (0, '
                             f'{1 - scale[1]:g}) so that the path fits, got '
                             f'{travel}')
        check_drawing(scale, fragment_size, num_fragments, noise)
        self.split = split
        self.label = label
        self.drawing = dict(canvas_size=canvas_size, num_frames=num_frames,
                            scale=tuple(scale), max_angle=float(max_angle),
                            travel=float(travel),
                            num_directions=num_directions,
                            num_fragments=int(num_fragments),
                            fragment_size=tuple(fragment_size),
                            noise=float(noise))
        self.canvas_seed = canvas_seed
        self.redraw = split == 'train' if redraw is None else bool(redraw)
        images, labels = _load_digits()
        index = digits_splits(tuple(ratios), split_seed, labels)[split]
        self._scans, self._labels = images[index], labels[index]
        self.num_scenes = len(index) if num_scenes is None \
            else int(num_scenes)
        classes = tuple(str(i) for i in range(10)) if label == 'digit' else \
            tuple(f'{360 * k / num_directions:g} deg'
                  for k in range(num_directions))
        kwargs.setdefault('serialize_data', False)
        kwargs.setdefault('metainfo', dict(classes=classes))
        super().__init__(pipeline=list(pipeline), **kwargs)

    def load_data_list(self):
        """One entry per clip: its scan and digit."""
        n = len(self._labels)
        return [dict(scan=i % n, digit=int(self._labels[i % n]),
                     sample_idx=i) for i in range(self.num_scenes)]

    def clip(self, idx, epoch=0):
        """Clip ``idx`` at ``epoch``: its frames, the digit's box in each,
        and the direction of the motion."""
        info = super().get_data_info(idx)
        epoch = int(epoch) if self.redraw else 0
        rng = np.random.default_rng(
            [self.canvas_seed, _SPLIT_CODE[self.split], epoch, int(idx)])
        direction = int(rng.integers(self.drawing['num_directions']))
        frames, boxes = render_clip(rng, self._scans[info['scan']],
                                    self._scans, direction=direction,
                                    **self.drawing)
        return frames, boxes, direction

    def get_data_info(self, idx, epoch=0):
        """The clip's info with its frames drawn (``imgs``) and its
        ``label``."""
        info = dict(super().get_data_info(idx))
        frames, boxes, direction = self.clip(idx, epoch)
        h, w = frames[0].shape[:2]
        info.update(label=info['digit'] if self.label == 'digit' else
                    direction, direction=direction)
        info.update(imgs=frames, digit_boxes=boxes, num_clips=1,
                    clip_len=len(frames), frame_inds=np.arange(len(frames)),
                    modality='RGB', img_shape=(h, w), original_shape=(h, w),
                    epoch=epoch if self.redraw else 0)
        return info
