"""Reliability claims: wrong checkpoints are refused, weights-only
checkpoints cannot be resumed from, explicit options win over the tiny
overlay, and every tiny run is seeded."""
import os.path as osp
import subprocess
import sys

import pytest
import torch
from mmengine.config import Config
from mmpretrain.models import VisionTransformer

import mmvitaccel  # noqa: F401
from mmvitaccel.models import STViTRSwinTransformer
from mmvitaccel.models.utils import describe_checkpoint, load_with_report
from mmvitaccel.apis.launch import build_runner
from mmvitaccel.tiny import tinyfy_config

from .utils import REPO, TINY_MODELS, tiny_config

TINY_SWIN = dict(embed_dims=32, depths=(1, 1, 6, 1), num_heads=(1, 2, 4, 8))
TINY_DEIT = dict(embed_dims=64, num_layers=2, num_heads=2, feedforward_channels=128)


@pytest.fixture(scope='module')
def deit_checkpoint(tmp_path_factory):
    """A (tiny) DeiT classifier checkpoint in mmpretrain's names."""
    torch.manual_seed(0)
    vit = VisionTransformer(arch=TINY_DEIT, img_size=224, patch_size=16)
    path = tmp_path_factory.mktemp('ckpt') / 'deit.pth'
    torch.save(dict(state_dict={f'backbone.{k}': v for k, v in vit.state_dict().items()},
                    meta=dict()), path)
    return str(path)


def test_describe_checkpoint_names_the_architecture(deit_checkpoint):
    state = torch.load(deit_checkpoint, weights_only=True)['state_dict']
    text = describe_checkpoint(state)
    assert 'ViT/DeiT (mmpretrain names)' in text and 'embed dims 64' in text
    assert '2 blocks' in text


def test_init_cfg_refuses_a_checkpoint_of_another_model(deit_checkpoint):
    model = STViTRSwinTransformer(
        **TINY_SWIN, init_cfg=dict(type='Pretrained', checkpoint=deit_checkpoint))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r'looks like a ViT/DeiT.*min_loaded_share=0'):
        model.init_weights()
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # nothing loaded


def test_init_cfg_opt_out_loads_anyway(deit_checkpoint):
    model = STViTRSwinTransformer(
        **TINY_SWIN, init_cfg=dict(type='Pretrained', checkpoint=deit_checkpoint,
                                   min_loaded_share=0))
    model.init_weights()
    assert model.load_report['loaded'] == []


def test_min_share_is_validated():
    vit = VisionTransformer(arch=TINY_DEIT, img_size=224, patch_size=16)
    with pytest.raises(ValueError, match='min_loaded_share'):
        load_with_report(vit, vit.state_dict(), min_share=1.5)


def test_a_partial_host_checkpoint_still_loads(deit_checkpoint):
    """Most of the tensors present (a head or a few blocks missing) is a
    normal fine-tuning case and loads with a report."""
    vit = VisionTransformer(arch=dict(TINY_DEIT, num_layers=3), img_size=224, patch_size=16)
    state = torch.load(deit_checkpoint, weights_only=True)['state_dict']
    report = load_with_report(vit, {k[len('backbone.'):]: v for k, v in state.items()})
    assert report['loaded'] and report['missing']  # layer 2 is missing


def _tiny_runner_cfg(tmp_path, tiny_data_dir, **options):
    cfg = tiny_config('configs/stvit_r_swin_s_in1k.py', tmp_path / 'work', tiny_data_dir,
                      max_epochs=1)
    cfg.merge_from_dict(options)
    return cfg


def test_load_from_refuses_another_model(tmp_path, tiny_data_dir, deit_checkpoint):
    cfg = _tiny_runner_cfg(tmp_path, tiny_data_dir, load_from=deit_checkpoint)
    runner = build_runner(cfg)
    with pytest.raises(ValueError, match=r'matches 0 of the .*looks like a ViT/DeiT'):
        runner.train()


def test_load_from_opt_out(tmp_path, tiny_data_dir, deit_checkpoint):
    cfg = _tiny_runner_cfg(tmp_path, tiny_data_dir, load_from=deit_checkpoint,
                           checkpoint_check=dict(min_loaded_share=0))
    cfg.train_cfg.max_epochs = 1
    runner = build_runner(cfg)
    runner.load_or_resume()  # loads nothing, refuses nothing


def test_resume_from_weights_only_checkpoint_is_explained(tmp_path, tiny_data_dir):
    cfg = _tiny_runner_cfg(tmp_path, tiny_data_dir)
    runner = build_runner(cfg)
    path = tmp_path / 'weights.pth'
    torch.save(dict(state_dict=runner.model.state_dict()), path)
    cfg = _tiny_runner_cfg(tmp_path, tiny_data_dir, resume=True, load_from=str(path))
    runner = build_runner(cfg)
    with pytest.raises(ValueError, match=r'--resume needs a checkpoint written by the training '
                                         r'runner.*load_from'):
        runner.train()


def test_explicit_options_win_over_the_tiny_overlay(tiny_data_dir):
    cfg = Config.fromfile(osp.join(REPO, 'configs/sait_deit_s_m07_in1k.py'))
    options = {'default_hooks.checkpoint.interval': 1, 'tiny.max_epochs': 3,
               'randomness.seed': 7}
    cfg.merge_from_dict(options)
    tiny = tinyfy_config(cfg, cfg_options=options, data_root=str(tiny_data_dir))
    assert tiny.train_cfg.max_epochs == 3  # the overlay option itself
    assert tiny.default_hooks.checkpoint.interval == 1  # would be 3
    assert tiny.randomness.seed == 7


def test_every_tiny_run_is_seeded(tiny_data_dir):
    """The mmpretrain bases set randomness.seed=None; a tiny run gets seed 0
    and the step seeding that makes resume exact."""
    cfg = Config.fromfile(osp.join(REPO, 'configs/sait_deit_s_m07_in1k.py'))
    assert cfg.randomness.seed is None
    tiny = tinyfy_config(cfg, data_root=str(tiny_data_dir))
    assert tiny.randomness.seed == 0
    assert [h['type'] for h in tiny.custom_hooks].count('mmvitaccel.StepSeedHook') == 1
    again = tinyfy_config(tinyfy_config(cfg, data_root=str(tiny_data_dir)))
    assert [h['type'] for h in again.custom_hooks].count('mmvitaccel.StepSeedHook') == 1


@pytest.mark.slow
def test_train_tool_keeps_an_explicit_checkpoint_interval(tmp_path, tiny_data_dir):
    """`tools/train.py --tiny --cfg-options default_hooks.checkpoint.interval=1`
    leaves a checkpoint per epoch, so a killed tiny run can be resumed."""
    cfg = Config.fromfile(osp.join(REPO, 'configs/hvit_deit_s_in1k.py'))
    cfg.merge_from_dict(TINY_MODELS['configs/hvit_deit_s_in1k.py'])
    cfg.dump(str(tmp_path / 'cfg.py'))
    out = subprocess.run(
        [sys.executable, 'tools/train.py', str(tmp_path / 'cfg.py'), '--tiny', '--work-dir',
         str(tmp_path / 'work'), '--cfg-options', 'tiny.max_epochs=2',
         f'tiny.data_root={tiny_data_dir}', 'default_hooks.checkpoint.interval=1'],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert osp.exists(tmp_path / 'work' / 'epoch_1.pth')
    assert osp.exists(tmp_path / 'work' / 'epoch_2.pth')
