"""Real handwritten digits on a cluttered canvas: the small-scale study's
data.

scikit-learn ships 1,797 scans of handwritten digits, 8x8 pixels with 17
grey levels (the UCI "optical recognition of handwritten digits" test set),
so this dataset works offline. Each sample places one digit at a random
position, scale and small rotation on a larger canvas, adds fragments of
other digits of the same split as distractors and Gaussian noise. Most
patches of a ViT then hold background or clutter, as in natural images, so
that which tokens a method keeps matters.

Splits are stratified by label and fixed by ``split_seed`` (60/20/20 by
default). A canvas is a pure function of ``(canvas_seed, split, epoch,
index)``: validation and test canvases are drawn once (epoch 0); training
canvases are new every epoch when the dataset is read through
:class:`EpochSampler`, which yields ``(epoch, index)`` pairs. The sampler's
epoch is set by mmengine's ``DistSamplerSeedHook`` on every rank from the
runner's epoch, so resumed and distributed runs draw the very canvases of
an uninterrupted single-process run, with any number of (persistent)
workers.
"""
import cv2
import numpy as np
from mmengine.dataset import BaseDataset, DefaultSampler

from mmvitaccel.registry import DATA_SAMPLERS, DATASETS

__all__ = [
    'DigitsCanvas', 'EpochDrawnDataset', 'EpochSampler', 'check_drawing',
    'draw_fragments',
    'digits_splits', 'render_canvas'
]

SPLITS = ('train', 'val', 'test')
_SPLIT_CODE = {'train': 0, 'val': 1, 'test': 2}
#: random positions tried per fragment before it is left out
_PLACEMENT_TRIES = 8


def _load_digits():
    """The 1,797 scans as ``(n, 8, 8)`` float in ``[0, 1]`` and labels."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    return digits.images.astype(np.float32) / 16., digits.target.astype(
        np.int64)


def digits_splits(ratios=(0.6, 0.2, 0.2), split_seed=0, labels=None):
    """Stratified train/val/test indices into scikit-learn's digits.

    Args:
        ratios (tuple[float, float, float]): shares of train, val, test,
            summing to one.
        split_seed (int): the shuffling seed.
        labels (np.ndarray, optional): the labels (default: the digits').

    Returns:
        dict[str, np.ndarray]: sorted indices per split, disjoint, covering
        every scan.
    """
    from sklearn.model_selection import train_test_split
    if len(ratios) != 3 or min(ratios) <= 0 or abs(sum(ratios) - 1) > 1e-6:
        raise ValueError('ratios must be three positive shares (train, val, '
                         f'test) summing to 1, got {ratios}')
    if labels is None:
        labels = _load_digits()[1]
    index = np.arange(len(labels))
    train, rest = train_test_split(
        index, train_size=ratios[0], random_state=split_seed,
        stratify=labels)
    val, test = train_test_split(
        rest, train_size=ratios[1] / (ratios[1] + ratios[2]),
        random_state=split_seed, stratify=labels[rest])
    return dict(train=np.sort(train), val=np.sort(val), test=np.sort(test))


def _warp(patch, size, angle):
    """An ``(h, w)`` float patch resized to ``size`` px and rotated."""
    out = cv2.resize(patch, (size, size), interpolation=cv2.INTER_LINEAR)
    if angle:
        m = cv2.getRotationMatrix2D(((size - 1) / 2, (size - 1) / 2), angle,
                                    1.0)
        out = cv2.warpAffine(out, m, (size, size), flags=cv2.INTER_LINEAR,
                             borderValue=0.)
    return out


def render_canvas(rng, digit, fragments_from, canvas_size=32,
                  scale=(0.4, 0.65), max_angle=12., num_fragments=2,
                  fragment_size=(3, 4), noise=0.1):
    """Draw one canvas.

    The digit (8x8) is resized to ``s = round(u * canvas_size)`` px,
    ``u ~ U(scale)``, rotated by ``~U(-max_angle, max_angle)`` degrees and
    placed wholly inside the canvas at a uniform position. Each fragment is
    a ``k x k`` crop (``k ~ U{fragment_size}``) of a random scan of
    ``fragments_from``, enlarged by the digit's factor ``s / 8``, at a
    uniform position that does not overlap the digit's box (up to
    :data:`_PLACEMENT_TRIES` draws, else the fragment is left out), its
    intensity scaled by ``~U(0.5, 1)``; fragments combine by maximum.
    Finally ``N(0, noise^2)`` noise is added and the canvas clipped to
    ``[0, 1]``.

    Args:
        rng (np.random.Generator): the canvas's generator.
        digit (np.ndarray): ``(8, 8)`` in ``[0, 1]``.
        fragments_from (np.ndarray): ``(n, 8, 8)`` scans to crop from.
        canvas_size (int): the canvas side in pixels.
        scale (tuple[float, float]): the digit's side as a share of the
            canvas's.
        max_angle (float): the largest rotation in degrees.
        num_fragments (int): distractors per canvas.
        fragment_size (tuple[int, int]): the crop side range, in scan
            pixels (of 8).
        noise (float): the noise's standard deviation.

    Returns:
        tuple[np.ndarray, tuple[int, int, int, int]]: the ``(H, W, 3)``
        uint8 canvas (grey) and the digit's box ``(x0, y0, x1, y1)``.
    """
    canvas = np.zeros((canvas_size, canvas_size), np.float32)
    side = int(round(rng.uniform(*scale) * canvas_size))
    side = min(max(side, 8), canvas_size)
    factor = side / 8.
    glyph = _warp(digit, side, rng.uniform(-max_angle, max_angle))
    y0, x0 = (int(v) for v in rng.integers(0, canvas_size - side + 1,
                                           size=2))
    canvas[y0:y0 + side, x0:x0 + side] = glyph
    draw_fragments(rng, canvas, fragments_from, num_fragments, fragment_size,
                   lambda k: k * factor, [(x0, y0, x0 + side, y0 + side)])
    canvas += rng.normal(0., noise, canvas.shape).astype(np.float32)
    img = (np.clip(canvas, 0., 1.) * 255. + 0.5).astype(np.uint8)
    return np.repeat(img[..., None], 3, axis=2), (x0, y0, x0 + side,
                                                  y0 + side)


def draw_fragments(rng, canvas, scans, num_fragments, fragment_size,
                   enlarge, avoid):
    """Draw clutter into ``canvas`` in place: per fragment, a ``k x k`` crop
    (``k ~ U{fragment_size}``) of a random scan, ``round(enlarge(k))`` px a
    side (at least 2), its intensity scaled by ``~U(0.5, 1)``, at a uniform
    position that overlaps none of the ``avoid`` boxes (up to
    :data:`_PLACEMENT_TRIES` draws, else it is left out); fragments combine
    by maximum. The canvas, the scene and the clip draw their clutter so.

    Args:
        rng (np.random.Generator): the drawing's generator.
        canvas (np.ndarray): ``(H, W)`` float, square.
        scans (np.ndarray): ``(n, 8, 8)`` scans to crop from.
        num_fragments (int): fragments to draw.
        fragment_size (tuple[int, int]): the crop side range, in scan pixels.
        enlarge (Callable[[int], float]): the side in pixels of a crop of
            ``k`` scan pixels (it may draw from ``rng``).
        avoid (list[tuple]): ``(x0, y0, x1, y1)`` boxes to keep clear.
    """
    size = canvas.shape[0]
    for _ in range(num_fragments):
        src = scans[rng.integers(len(scans))]
        k = int(rng.integers(fragment_size[0], fragment_size[1] + 1))
        y, x = rng.integers(0, 8 - k + 1, size=2)
        px = max(2, int(round(enlarge(k))))
        piece = _warp(src[y:y + k, x:x + k], px, 0.) * rng.uniform(0.5, 1.)
        for _ in range(_PLACEMENT_TRIES):
            py, qx = (int(v) for v in rng.integers(0, size - px + 1, size=2))
            if all(py >= y1 or py + px <= y0 or qx >= x1 or qx + px <= x0
                   for x0, y0, x1, y1 in avoid):
                region = canvas[py:py + px, qx:qx + px]
                np.maximum(region, piece, out=region)
                break


def check_drawing(scale, fragment_size, num_fragments, noise):
    """Refuse drawing settings that :func:`render_canvas` and
    :func:`~.digits_scenes.render_scene` share, naming the parameter."""
    if not 0 < scale[0] <= scale[1] <= 1:
        raise ValueError('scale must be (low, high) with 0 < low <= high'
                         f' <= 1, got {scale}')
    if not 1 <= fragment_size[0] <= fragment_size[1] <= 8:
        raise ValueError('fragment_size must be (low, high) in 1..8, '
                         f'got {fragment_size}')
    if num_fragments < 0 or noise < 0:
        raise ValueError('num_fragments and noise must be >= 0, got '
                         f'{num_fragments}, {noise}')


class EpochDrawnDataset(BaseDataset):
    """A dataset whose samples are drawn per epoch: ``dataset[i]`` is
    sample ``i`` of epoch 0, ``dataset[(epoch, i)]`` (what
    :class:`EpochSampler` asks for) that of ``epoch``; subclasses implement
    ``get_data_info(idx, epoch)``."""

    def __getitem__(self, idx):
        """``idx`` or ``(epoch, idx)``: the transformed sample."""
        if not self._fully_initialized:
            self.full_init()
        epoch = 0
        if isinstance(idx, (tuple, list)):
            epoch, idx = idx
        return self.pipeline(self.get_data_info(int(idx), epoch))


@DATASETS.register_module()
class DigitsCanvas(EpochDrawnDataset):
    """scikit-learn's handwritten digits, one per cluttered canvas.

    Each item is ``dict(img=(H, W, 3) uint8, gt_label=int, digit_box=(x0,
    y0, x1, y1), ...)`` passed through ``pipeline`` (e.g. mmpretrain's
    ``PackInputs``). ``dataset[i]`` is the canvas of epoch 0;
    ``dataset[(epoch, i)]`` (what :class:`EpochSampler` asks for) is the
    canvas of that epoch; with ``redraw=False`` (validation, test) the
    epoch is ignored. See :func:`render_canvas` for the drawing.

    Args:
        split (str): ``'train'``, ``'val'`` or ``'test'``.
        canvas_size (int): the canvas side in pixels.
        scale (tuple[float, float]): the digit's side as a share of the
            canvas's.
        max_angle (float): the largest rotation of the digit, degrees.
        num_fragments (int): fragments of other digits per canvas.
        fragment_size (tuple[int, int]): crop side range in scan pixels.
        noise (float): Gaussian noise's standard deviation (of ``[0, 1]``).
        split_seed (int): the seed of the stratified splits.
        canvas_seed (int): the seed of the canvases.
        ratios (tuple[float, float, float]): train/val/test shares.
        redraw (bool, optional): new canvases per epoch; default: True for
            ``'train'`` only.
        max_samples (int, optional): use the first ``max_samples`` of the
            split (reduced runs).
        repeats (int): canvases of each scan per epoch: the dataset has
            ``repeats * num_scans`` items, item ``i`` showing scan
            ``i % num_scans`` on a canvas of its own (more iterations per
            epoch of a small split; 1: one canvas per scan).
        pipeline (list): the transforms.
        **kwargs: other arguments of mmengine's ``BaseDataset``.
    """

    METAINFO = dict(classes=tuple(str(i) for i in range(10)))

    def __init__(self,
                 split='train',
                 canvas_size=32,
                 scale=(0.4, 0.65),
                 max_angle=12.,
                 num_fragments=2,
                 fragment_size=(3, 4),
                 noise=0.1,
                 split_seed=0,
                 canvas_seed=0,
                 ratios=(0.6, 0.2, 0.2),
                 redraw=None,
                 max_samples=None,
                 repeats=1,
                 pipeline=(),
                 **kwargs):
        if split not in SPLITS:
            raise ValueError(f'split must be one of {SPLITS}, got {split!r}')
        if not isinstance(canvas_size, int) or canvas_size < 8:
            raise ValueError('canvas_size must be an int >= 8 (a scan is '
                             f'8x8), got {canvas_size!r}')
        check_drawing(scale, fragment_size, num_fragments, noise)
        if not isinstance(repeats, int) or repeats < 1:
            raise ValueError(f'repeats must be an int >= 1, got {repeats!r}')
        self.split = split
        self.canvas_size = canvas_size
        self.scale = tuple(scale)
        self.max_angle = float(max_angle)
        self.num_fragments = int(num_fragments)
        self.fragment_size = tuple(fragment_size)
        self.noise = float(noise)
        self.split_seed = split_seed
        self.canvas_seed = canvas_seed
        self.ratios = tuple(ratios)
        self.redraw = split == 'train' if redraw is None else bool(redraw)
        self.max_samples = max_samples
        self.repeats = repeats
        images, labels = _load_digits()
        index = digits_splits(self.ratios, split_seed, labels)[split]
        if max_samples is not None:
            index = index[:max_samples]
        self._scans = images[index]
        self._labels = labels[index]
        self._scan_index = index
        kwargs.setdefault('serialize_data', False)
        super().__init__(pipeline=list(pipeline), **kwargs)

    def load_data_list(self):
        """``repeats`` entries per scan of the split (item ``i`` is scan
        ``i % num_scans``): its label and scan index."""
        n = len(self._labels)
        return [
            dict(gt_label=int(self._labels[i % n]),
                 scan_index=int(self._scan_index[i % n]), sample_idx=i)
            for i in range(self.repeats * n)
        ]

    def canvas(self, idx, epoch=0):
        """The canvas of sample ``idx`` at ``epoch`` (ignored unless
        ``redraw``).

        Returns:
            tuple[np.ndarray, tuple]: ``(H, W, 3)`` uint8 and the digit box.
        """
        epoch = int(epoch) if self.redraw else 0
        rng = np.random.default_rng(
            [self.canvas_seed, _SPLIT_CODE[self.split], epoch, int(idx)])
        return render_canvas(rng, self._scans[int(idx) % len(self._scans)],
                             self._scans,
                             self.canvas_size, self.scale, self.max_angle,
                             self.num_fragments, self.fragment_size,
                             self.noise)

    def get_data_info(self, idx, epoch=0):
        """The sample's info with its canvas drawn (``img``)."""
        info = dict(super().get_data_info(idx))
        img, box = self.canvas(idx, epoch)
        h, w = img.shape[:2]
        info.update(img=img, img_shape=(h, w), ori_shape=(h, w),
                    digit_box=box, epoch=epoch if self.redraw else 0)
        return info



@DATA_SAMPLERS.register_module()
class EpochSampler(DefaultSampler):
    """mmengine's ``DefaultSampler`` that yields ``(epoch, index)`` pairs,
    so that a dataset can draw new samples every epoch (e.g.
    :class:`DigitsCanvas`) as a pure function of the epoch and the index.

    The order (shuffling, padding, the rank's share) is exactly
    ``DefaultSampler``'s; its epoch is set by ``DistSamplerSeedHook``.

    Args:
        **kwargs: the arguments of ``DefaultSampler``.
    """

    def __iter__(self):
        epoch = self.epoch
        return ((epoch, i) for i in super().__iter__())
