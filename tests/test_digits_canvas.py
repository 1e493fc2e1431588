"""The study's data: scikit-learn's digits on a cluttered canvas
(``mmvitaccel.DigitsCanvas``), its splits, its per-epoch canvases and the
study configs on it."""
import copy
import os.path as osp

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.dataset import DefaultSampler
from mmengine.registry import DATA_SAMPLERS, DATASETS

import mmvitaccel  # noqa: F401
from projects.digits_study.datasets import (DigitsCanvas, EpochSampler,
                                            digits_splits, render_canvas)

from .utils import (REPO, small_digits_run,
                    train_and_predict_one_batch)

HOST = 'configs/study/digits_deit_host.py'


def test_splits_fixed_disjoint_covering_and_stratified():
    labels = DigitsCanvas('train')._labels  # noqa: F841 (loads sklearn)
    a, b = digits_splits(split_seed=0), digits_splits(split_seed=0)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    train, val, test = (set(a[k].tolist()) for k in ('train', 'val', 'test'))
    assert not train & val and not train & test and not val & test
    assert len(train | val | test) == 1797
    assert len(train) == round(0.6 * 1797)
    from sklearn.datasets import load_digits
    y = load_digits().target
    overall = np.bincount(y, minlength=10) / len(y)
    for k in a:
        share = np.bincount(y[a[k]], minlength=10) / len(a[k])
        # stratified: each class's share within one sample of the total's
        assert np.abs(share - overall).max() <= 1.5 / len(a[k]) + 1e-9, k
    other = digits_splits(split_seed=1)
    assert set(other['test'].tolist()) != test


@pytest.mark.parametrize('bad', [
    dict(split='dev'), dict(canvas_size=4), dict(scale=(0.7, 0.5)),
    dict(fragment_size=(0, 3)), dict(noise=-1.), dict(repeats=0)
])
def test_bad_arguments_are_refused_naming_them(bad):
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        DigitsCanvas(**bad)


def test_same_seed_same_canvases_and_train_canvases_change_per_epoch():
    a, b = DigitsCanvas('train'), DigitsCanvas('train')
    np.testing.assert_array_equal(a.canvas(5, 3)[0], b.canvas(5, 3)[0])
    assert not np.array_equal(a.canvas(5, 3)[0], a.canvas(5, 4)[0])
    other = DigitsCanvas('train', canvas_seed=1)
    assert not np.array_equal(a.canvas(5, 3)[0], other.canvas(5, 3)[0])
    # (epoch, index) items are that epoch's canvas
    np.testing.assert_array_equal(a[(4, 5)]['img'], a.canvas(5, 4)[0])


def test_repeats_show_every_scan_on_canvases_of_its_own():
    one, three = DigitsCanvas('train'), DigitsCanvas('train', repeats=3)
    n = len(one)
    assert len(three) == 3 * n
    # repeats=1 items are the former ones; the extra items repeat the scans
    # in the same order, each on a new canvas of the same epoch
    np.testing.assert_array_equal(three.canvas(5, 2)[0], one.canvas(5, 2)[0])
    labels = [three.get_data_info(i)['gt_label'] for i in (5, n + 5, 2 * n
                                                           + 5)]
    assert labels == [one.get_data_info(5)['gt_label']] * 3
    assert three.get_data_info(n + 5)['scan_index'] == \
        one.get_data_info(5)['scan_index']
    assert not np.array_equal(three.canvas(5, 2)[0],
                              three.canvas(n + 5, 2)[0])


@pytest.mark.parametrize('split', ['val', 'test'])
def test_val_and_test_canvases_are_fixed(split):
    ds = DigitsCanvas(split)
    np.testing.assert_array_equal(ds[(0, 7)]['img'], ds[(9, 7)]['img'])
    assert len(ds) == (359 if split == 'val' else 360)


def test_the_digit_lies_inside_the_canvas_and_the_clutter_beside_it():
    rng = np.random.default_rng(0)
    blank, bright = np.zeros((8, 8), np.float32), np.ones((3, 8, 8),
                                                          np.float32)
    clutter = 0
    for size in (16, 32, 48):
        for _ in range(30):
            # a bright digit alone: exactly its box is lit
            img, (x0, y0, x1, y1) = render_canvas(
                rng, bright[0], bright, size, max_angle=0., noise=0.,
                num_fragments=0)
            assert 0 <= x0 < x1 <= size and 0 <= y0 < y1 <= size
            assert img.shape == (size, size, 3) and img.dtype == np.uint8
            box = np.zeros((size, size), bool)
            box[y0:y1, x0:x1] = True
            assert (img[..., 0][box] == 255).all()
            assert (img[..., 0][~box] == 0).all()
            # a blank digit among bright fragments: none lands on its box
            img, (x0, y0, x1, y1) = render_canvas(rng, blank, bright, size,
                                                  noise=0.)
            assert (img[y0:y1, x0:x1] == 0).all()
            clutter += int(img.max() > 0)
    assert clutter > 45  # fragments are drawn on most canvases


def test_epoch_sampler_yields_the_default_order_with_the_epoch():
    ds = DigitsCanvas('val')
    plain = DefaultSampler(ds, shuffle=True, seed=3)
    ours = EpochSampler(ds, shuffle=True, seed=3)
    for epoch in (0, 2):
        plain.set_epoch(epoch)
        ours.set_epoch(epoch)
        assert list(ours) == [(epoch, i) for i in plain]
    assert DATA_SAMPLERS.get('mmvitaccel.EpochSampler') is EpochSampler
    assert DATASETS.get('mmvitaccel.DigitsCanvas') is DigitsCanvas


def test_a_run_draws_the_same_canvases_in_any_worker_setting():
    """What the loader gives for epoch 2 does not depend on workers: the
    canvas is a function of (seed, epoch, index) alone."""
    from mmengine.registry import DefaultScope, init_default_scope
    from mmengine.runner import Runner
    cfg = Config.fromfile(osp.join(REPO, HOST))
    init_default_scope('mmpretrain')
    loaders = []
    for workers in (0, 2):
        dl = copy.deepcopy(cfg.train_dataloader)
        dl.update(num_workers=workers, batch_size=16,
                  persistent_workers=workers > 0)
        dl.sampler.seed = 0
        with DefaultScope.overwrite_default_scope('mmpretrain'):
            loader = Runner.build_dataloader(dl)
        loader.sampler.set_epoch(2)
        loaders.append(next(iter(loader)))
    for a, b in zip(loaders[0]['inputs'], loaders[1]['inputs']):
        assert torch.equal(a, b)


def test_host_config_trains_one_step_and_predicts(tmp_path):
    cfg = Config.fromfile(osp.join(REPO, HOST))
    small_digits_run(cfg, tmp_path)
    updates = {}
    losses, preds, metrics = train_and_predict_one_batch(cfg, updates)
    assert torch.isfinite(losses['loss'])
    assert len(preds) == 8 and 'accuracy/top1' in metrics
    assert sum(updates.values()) >= 0.75 * len(updates)
    arch = cfg.model.backbone.arch
    assert arch['num_layers'] == 12  # the papers' placements carry over
