"""The tiny overlay rewrites any recipe for generated data at CPU scale."""
import os.path as osp

import pytest
from mmengine.config import Config

import mmvitaccel  # noqa: F401
from mmvitaccel.tiny import tinyfy_config

from .utils import REPO

COCO = osp.join(REPO, 'configs/_base_/swin_s_cascade_mask_rcnn_3x_coco.py')
ADE = osp.join(REPO, 'configs/_base_/swin_s_upernet_ade20k.py')
K400 = osp.join(REPO, 'configs/_base_/swin_t_k400.py')
SWIN_IN1K = osp.join(REPO, 'configs/_base_/swin_s_in1k.py')


def test_coco_recipe(tiny_data_dir):
    cfg = tinyfy_config(Config.fromfile(COCO), data_root=str(tiny_data_dir))
    root = str(tiny_data_dir / 'coco')
    assert cfg.train_dataloader.dataset.data_root.rstrip('/') == root
    assert cfg.val_evaluator.ann_file == root + \
        '/annotations/instances_val2017.json'
    assert osp.isfile(cfg.val_evaluator.ann_file)
    # every size shrinks by the coco factor, 0.25
    pipeline = cfg.train_dataloader.dataset.pipeline
    choice = [t for t in pipeline if t.type == 'RandomChoice'][0]
    assert choice.transforms[0][0].scales[-1] == (200, 333)
    assert choice.transforms[1][1].crop_size == (96, 150)
    # schedule: 2 epochs, steps rescaled, iteration warm-up capped
    assert cfg.train_cfg.max_epochs == 2
    warmup, steps = cfg.param_scheduler
    assert warmup.end == 5 and not warmup.by_epoch
    assert steps.milestones == [2, 2] and steps.end == 2  # both decays kept
    # no AMP on a CPU, no download of the Swin-S weights
    assert cfg.optim_wrapper.type == 'OptimWrapper'
    assert 'loss_scale' not in cfg.optim_wrapper
    assert cfg.model.backbone.init_cfg is None
    # the upstream recipe is otherwise unchanged
    assert cfg.model.backbone.depths == [2, 2, 18, 2]
    assert cfg.optim_wrapper.optimizer.lr == 1e-4


def test_iteration_based_recipe(tiny_data_dir):
    cfg = tinyfy_config(Config.fromfile(ADE), data_root=str(tiny_data_dir),
                        max_iters=10)
    assert cfg.train_cfg.max_iters == 10
    assert cfg.model.data_preprocessor.size == (128, 128)
    assert cfg.default_hooks.checkpoint.interval == 10
    warmup, poly = cfg.param_scheduler
    assert warmup.end <= poly.end <= 10
    assert cfg.train_dataloader.dataset.data_root == str(
        tiny_data_dir / 'ade20k')


def test_video_recipe_paths_and_clips(tiny_data_dir):
    cfg = tinyfy_config(Config.fromfile(K400), data_root=str(tiny_data_dir))
    root = str(tiny_data_dir / 'kinetics')
    ds = cfg.train_dataloader.dataset
    assert ds.ann_file == root + '/kinetics400_train_list_videos.txt'
    assert ds.data_prefix.video == root + '/videos_train'
    assert osp.isfile(ds.ann_file)
    sample = [t for t in ds.pipeline if t.type == 'SampleFrames'][0]
    assert sample.clip_len == 8 and sample.num_clips == 1
    assert cfg.model.backbone.pretrained is None


def test_idempotent_and_options_from_config(tiny_data_dir):
    cfg = Config.fromfile(SWIN_IN1K)
    cfg.tiny = dict(max_epochs=3, data_root=str(tiny_data_dir))
    once = tinyfy_config(cfg)
    twice = tinyfy_config(once)
    assert once.train_cfg.max_epochs == 3
    assert twice is once  # idempotence rests on the 'applied' flag
    # the original is not modified
    assert cfg.train_cfg.max_epochs == 300


def test_bad_options_are_refused(tiny_data_dir):
    cfg = Config.fromfile(SWIN_IN1K)
    with pytest.raises(ValueError, match='Unknown tiny overlay options'):
        tinyfy_config(cfg, max_epoch=3)
    cfg.train_dataloader.dataset.type = 'LVISV1Dataset'
    with pytest.raises(ValueError, match='known dataset type'):
        tinyfy_config(cfg, data_root=str(tiny_data_dir))


def test_config_chooses_its_tiny_kind(tiny_data_dir):
    """A config's ``tiny.kind`` picks the generated set: the Tiny-ImageNet
    config's CustomDataset gets the 200-class, 64x64 set."""
    cfg = Config.fromfile(
        osp.join(REPO, 'configs/hvit_pvtv2_b1_tinyimagenet.py'))
    cfg = tinyfy_config(cfg, data_root=str(tiny_data_dir))
    root = str(tiny_data_dir / 'tinyimagenet')
    for loader in (cfg.train_dataloader, cfg.val_dataloader):
        assert loader.dataset.data_root == root
    with open(osp.join(root, 'meta', 'train.txt')) as f:
        labels = {int(line.split()[-1]) for line in f}
    assert labels == set(range(cfg.model.head.num_classes))
    with pytest.raises(ValueError, match='Unknown tiny dataset kind'):
        tinyfy_config(Config.fromfile(SWIN_IN1K), kind='imagenet21k')


def test_config_overrides_apply_only_under_the_overlay(tiny_data_dir):
    """AS-ViT's config starts its thresholds where a random model's scores
    lie when --tiny trains it from scratch; without the overlay the
    paper's values stay."""
    path = osp.join(REPO, 'configs/asvit_deit_s_in1k.py')
    plain = Config.fromfile(path)
    assert tuple(plain.model.backbone.thresholds) == (0.001, 0.002, 0.003)
    assert plain.model.backbone.tau == 1e-4
    cfg = tinyfy_config(plain, data_root=str(tiny_data_dir))
    assert tuple(cfg.model.backbone.thresholds) == (0.004, 0.005, 0.006)
    assert cfg.model.backbone.tau == 2e-3
    assert tuple(plain.model.backbone.thresholds) == (0.001, 0.002, 0.003)


def test_tiny_runner_applies_overlay(tiny_data_dir, tmp_path):
    from mmengine.registry import RUNNERS
    cfg = Config.fromfile(SWIN_IN1K)
    cfg.runner_type = 'mmvitaccel.TinyRunner'
    cfg.tiny = dict(data_root=str(tiny_data_dir))
    cfg.work_dir = str(tmp_path)
    cfg.model.backbone.arch = dict(
        embed_dims=32, depths=[1, 1, 1, 1], num_heads=[1, 1, 1, 1])
    cfg.model.head.in_channels = 256
    runner = RUNNERS.build(cfg)
    assert runner.cfg.tiny.applied
    assert runner.cfg.train_cfg.max_epochs == 2


def test_wrapped_datasets_and_remote_weights(tiny_data_dir):
    cfg = Config.fromfile(COCO)
    inner = cfg.train_dataloader.dataset
    other = dict(inner, data_root='data/coco_extra/')
    cfg.train_dataloader.dataset = dict(
        type='RepeatDataset', times=3,
        dataset=dict(type='ConcatDataset', datasets=[inner, other]))
    cfg.load_from = 'open-mmlab://some/detector.pth'
    cfg.model.backbone.init_cfg.checkpoint = 'torchvision://resnet50'
    cfg = tinyfy_config(cfg, data_root=str(tiny_data_dir))
    wrapper = cfg.train_dataloader.dataset
    assert wrapper.times == 1
    roots = {d.data_root.rstrip('/') for d in wrapper.dataset.datasets}
    assert roots == {str(tiny_data_dir / 'coco')}
    assert cfg.load_from is None and cfg.model.backbone.init_cfg is None


def test_tiny_keeps_a_dataset_made_with_another_seed(tmp_path):
    from mmvitaccel.tiny.data import make_tiny_data, tiny_data_root
    made = make_tiny_data('ade20k', str(tmp_path / 'ade20k'), seed=3)
    marker = (tmp_path / 'ade20k' / '.tiny_data.json').read_text()
    assert tiny_data_root('ade20k', str(tmp_path)) == made
    assert (tmp_path / 'ade20k' / '.tiny_data.json').read_text() == marker


def test_shared_pipeline_objects_scaled_once(tiny_data_dir, tmp_path):
    """Loaders whose pipelines come from one base variable
    (``{{_base_.x}}``, which mmengine substitutes by shared objects) are
    each rewritten once: the shared transforms are not scaled once per
    loader that holds them (they were: 256 px became 64, not 128)."""
    (tmp_path / 'base.py').write_text(
        f"_base_ = {SWIN_IN1K!r}\n"
        "helper_pipeline = [dict(type='LoadImageFromFile'), "
        "dict(type='ResizeEdge', scale=256, edge='short'), "
        "dict(type='CenterCrop', crop_size=224), dict(type='PackInputs')]\n")
    (tmp_path / 'child.py').write_text(
        "_base_ = './base.py'\n"
        "val_dataloader = dict(dataset=dict("
        "pipeline={{_base_.helper_pipeline}}))\n"
        "test_dataloader = dict(dataset=dict("
        "pipeline={{_base_.helper_pipeline}}))\n")
    cfg = Config.fromfile(str(tmp_path / 'child.py'))
    out = tinyfy_config(cfg, data_root=str(tiny_data_dir), scale=0.5)
    for name in ('val_dataloader', 'test_dataloader'):
        resize, crop = out[name].dataset.pipeline[1:3]
        assert (resize.scale, crop.crop_size) == (128, 112), name
