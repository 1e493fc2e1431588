"""density_sweep, visualize_tokens and a brief AS-ViT training run on tiny
data, end to end as a user runs them (subprocesses)."""
import csv
import glob
import json
import os.path as osp

import cv2
import numpy as np
import pytest
import torch

from mmvitaccel.apis.harness import build_model, load_config
from mmvitaccel.analysis.flops import count_flops

from .test_tools import run
from .utils import REPO

# AS-DeiT-T on a 4-layer DeiT; under --tiny the config itself starts the
# thresholds where a random model's scores are, with a softer tau
TINY_ASVIT = '''
_base_ = '{repo}/configs/asvit_deit_t_in1k.py'
model = dict(
    backbone=dict(arch=dict(_delete_=True, embed_dims=64, num_layers=4,
                            num_heads=2, feedforward_channels=128),
                  prune_before=(1, 2, 3)),
    head=dict(in_channels=64),
    teacher=dict(
        _delete_=True,
        config=dict(
            type='ImageClassifier',
            backbone=dict(type='VisionTransformer', img_size=224,
                          patch_size=16,
                          arch=dict(embed_dims=64, num_layers=2, num_heads=2,
                                    feedforward_channels=128)),
            head=dict(type='VisionTransformerClsHead', num_classes=1000,
                      in_channels=64))))
'''


def _config(tmp_path):
    path = tmp_path / 'tiny_asvit.py'
    path.write_text(TINY_ASVIT.format(repo=REPO))
    return str(path)


def _checkpoint(config, tmp_path, tiny_data_dir):
    cfg = load_config(config, {'tiny.data_root': str(tiny_data_dir)},
                      tiny=True)
    torch.manual_seed(0)
    model = build_model(cfg)
    model.init_weights()
    path = str(tmp_path / 'tiny_asvit.pth')
    torch.save({'state_dict': model.state_dict()}, path)
    return path


@pytest.mark.slow
def test_density_sweep_and_visualize_tokens(tmp_path, tiny_data_dir):
    config = _config(tmp_path)
    checkpoint = _checkpoint(config, tmp_path, tiny_data_dir)
    tiny = ['--tiny', '--cfg-options', f'tiny.data_root={tiny_data_dir}']
    out = tmp_path / 'sweep'
    log = run('tools/analysis/density_sweep.py', config, checkpoint,
              '--param', 'threshold_scale', '--values', '0.5', '1', '2',
              '--num-images', '4', '--out-dir', str(out), *tiny)
    assert 'sweep' in log and '%' in log  # the progress bar
    with open(out / 'sweep.csv') as f:
        rows = list(csv.DictReader(f))
    assert [r['param'] for r in rows] == ['dense'] + ['threshold_scale'] * 3
    ratios = [float(r['flops_ratio']) for r in rows]
    assert ratios[0] == 1.0
    # the dense row is the unpruned model as the project's counter sees it
    cfg = load_config(config, {'tiny.data_root': str(tiny_data_dir),
                               'model.backbone.prune': False}, tiny=True)
    dense = count_flops(build_model(cfg), torch.randn(1, 3, 224, 224),
                        dict(mode='tensor')).total
    # exact: the same integer count, divided alike (CSV keeps a float's
    # every digit)
    assert float(rows[0]['gflops']) == dense / 1e9
    # higher thresholds keep fewer tokens
    assert ratios[1] >= ratios[2] >= ratios[3] and ratios[3] < 1.0
    assert all(0 <= float(r['accuracy']) <= 100 for r in rows)
    # speed: every setting timed interleaved against the dense run
    assert float(rows[0]['throughput_ratio']) == 1.0
    assert all(float(r['images_per_s']) > 0 and float(r['throughput_ratio']) > 0
               for r in rows)
    assert osp.getsize(out / 'sweep.png') > 1000

    vis = tmp_path / 'vis'
    run('tools/visualize_tokens.py', config, checkpoint, '--num-images', '2',
        '--out-dir', str(vis), '--montage', str(tmp_path / 'all.png'),
        *tiny)
    pngs = sorted(glob.glob(str(vis / '*.png')))
    assert len(pngs) == 2 * 3  # one per image and pruning location
    assert any('stage2_layer3' in p for p in pngs)
    # the montage: 3 rows (locations) of 2 drawings, 2-pixel gaps
    one = cv2.imread(pngs[0])
    whole = cv2.imread(str(tmp_path / 'all.png'))
    assert whole.shape == (3 * one.shape[0] + 4, 2 * one.shape[1] + 2, 3)
    np.testing.assert_array_equal(whole[:one.shape[0], :one.shape[1]], one)


@pytest.mark.slow
def test_brief_asvit_training_moves_thresholds_toward_the_budget(
        tmp_path, tiny_data_dir):
    config = _config(tmp_path)
    work = tmp_path / 'work'
    run('tools/train.py', config, '--tiny', '--work-dir', str(work),
        '--cfg-options', f'tiny.data_root={tiny_data_dir}',
        'tiny.max_epochs=1', 'randomness.seed=0')
    ckpt = torch.load(glob.glob(str(work / 'epoch_1.pth'))[0],
                      map_location='cpu', weights_only=False)
    theta = ckpt['state_dict']['backbone.thresholds']
    start = torch.tensor([0.004, 0.005, 0.006])
    # the dense model is far above the 0.65 budget: the thresholds rise in
    # total (the classification losses may pull one of them down). The budget
    # loss of one tiny epoch (batch 2, random weights) is too noisy for a
    # direction, so only its presence is checked; directions only, one tiny
    # epoch fixes no sizes
    assert theta.sum() > start.sum(), theta
    logs = glob.glob(str(work / '*' / 'vis_data' / 'scalars.json'))[0]
    with open(logs) as f:
        budget = [json.loads(line)['loss_budget'] for line in f
                  if 'loss_budget' in line]
    assert len(budget) >= 10
    assert all(b >= 0 for b in budget), budget
