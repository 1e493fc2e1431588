"""The tiny Kinetics-400 style video recognition dataset."""
import os
import os.path as osp

import cv2
import numpy as np

from mmvitaccel.tiny.data.common import (_COLOUR_NAMES, _COLOURS, _SHAPE_NAMES,
                                         _ensure, _fill, _jitter, _polygon,
                                         _progress, _rng, _texture,
                                         _write_text)

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
