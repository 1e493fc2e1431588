"""DigitsClips: clips of a moving real digit, as mmaction2 reads them."""
import math

import numpy as np
import pytest

from projects.digits_study.datasets import DigitsClips, render_clip
from projects.digits_study.datasets.digits_canvas import (_load_digits,
                                                          digits_splits)

PIPELINE = [
    dict(type='mmaction.FormatShape', input_format='NCTHW'),
    dict(type='mmaction.PackActionInputs')
]


def test_a_clip_is_a_pure_function_of_seed_split_epoch_and_index():
    train = DigitsClips(split='train', num_scenes=4, num_frames=4)
    again = DigitsClips(split='train', num_scenes=4, num_frames=4)
    a, b = train.get_data_info(2, 1), again.get_data_info(2, 1)
    assert all(np.array_equal(x, y) for x, y in zip(a['imgs'], b['imgs']))
    other = train.get_data_info(2, 2)  # training clips are new per epoch
    assert not all(np.array_equal(x, y)
                   for x, y in zip(a['imgs'], other['imgs']))
    test = DigitsClips(split='test', num_scenes=4, num_frames=4)
    c, d = test.get_data_info(2, 0), test.get_data_info(2, 5)
    assert all(np.array_equal(x, y) for x, y in zip(c['imgs'], d['imgs']))


@pytest.mark.parametrize('direction', range(8))
def test_the_digit_moves_along_its_direction_and_only_it_moves(direction):
    """Without noise, every frame is the first with the glyph moved: the
    box moves by ``travel * canvas`` along ``direction`` (image rows grow
    downwards), and the clutter stays where it was."""
    scans = _load_digits()[0][:20]
    rng = np.random.default_rng(direction)
    frames, boxes = render_clip(rng, scans[0], scans[1:], canvas_size=96,
                                num_frames=5, travel=0.4, noise=0.,
                                direction=direction, num_fragments=6)
    angle = 2 * math.pi * direction / 8
    (x0, y0, x1, y1), (u0, v0, u1, v1) = boxes[0], boxes[-1]
    assert (x1 - x0, y1 - y0) == (u1 - u0, v1 - v0)
    assert abs((u0 - x0) - 0.4 * 96 * math.cos(angle)) <= 1
    assert abs((v0 - y0) + 0.4 * 96 * math.sin(angle)) <= 1
    for frame, (a0, b0, a1, b1) in zip(frames, boxes):
        assert 0 <= a0 and 0 <= b0 and a1 <= 96 and b1 <= 96
        still = np.ones((96, 96), bool)
        for c0, d0, c1, d1 in boxes:
            still[d0:d1, c0:c1] = False
        assert np.array_equal(frame[still], frames[0][still])
    clutter = np.ones((96, 96), bool)
    for c0, d0, c1, d1 in boxes:
        clutter[d0:d1, c0:c1] = False
    assert frames[0][clutter].any()  # fragments were drawn off the path


def test_labels_are_the_digit_or_the_direction():
    digit = DigitsClips(split='val', num_scenes=30, num_frames=2)
    way = DigitsClips(split='val', num_scenes=30, num_frames=2,
                      label='direction', num_directions=4)
    labels = _load_digits()[1][digits_splits()['val']]
    for i in range(30):
        a, b = digit.get_data_info(i), way.get_data_info(i)
        assert a['label'] == labels[i]
        assert b['label'] == b['direction']
        assert 0 <= b['label'] < 4
    assert len({way.get_data_info(i)['label'] for i in range(30)}) == 4
    assert way.metainfo['classes'] == ('0 deg', '90 deg', '180 deg',
                                       '270 deg')


def test_clips_pack_for_mmaction2():
    ds = DigitsClips(split='test', label='direction', num_frames=6,
                     canvas_size=64, pipeline=PIPELINE)
    assert len(ds) == len(digits_splits()['test'])
    item = ds[3]
    assert tuple(item['inputs'].shape) == (1, 3, 6, 64, 64)
    assert int(item['data_samples'].gt_label) == ds.get_data_info(3)['label']


@pytest.mark.parametrize('kwargs,match', [
    (dict(split='dev'), 'split must be one of'),
    (dict(label='speed'), 'label must be one of'),
    (dict(num_frames=1), 'num_frames must be an int >= 2'),
    (dict(num_directions=1), 'num_directions must be an int >= 2'),
    (dict(travel=0.7), r'travel must be in \(0, 1 - scale\[1\]\)'),
    (dict(canvas_size=8), 'canvas_size must be an int >= 16'),
])
def test_bad_settings_are_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DigitsClips(**kwargs)
