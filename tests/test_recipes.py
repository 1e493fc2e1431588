"""Each base recipe builds, trains one step and predicts in its toolbox."""
import math

import pytest
import torch
from mmengine.hooks import Hook
from mmengine.runner import Runner

from .utils import (TINY_MODELS, assert_updated, parameter_updates,
                    tiny_config, train_and_predict_one_batch,
                    trainable_state)

EXPECTED_METRIC = {
    'configs/asvit_deit_s_b050_in1k.py': 'accuracy/top1',
    'configs/asvit_deit_s_r065_in1k.py': 'accuracy/top1',
    'configs/asvit_deit_s_r044_in1k.py': 'accuracy/top1',
    'configs/asvit_deit_t_r065_in1k.py': 'accuracy/top1',
    'configs/sait_deit_s_d042_in1k.py': 'accuracy/top1',
    'configs/sait_deit_s_v05_dino_in1k.py': 'accuracy/top1',
    'configs/sait_deit_s_m07_deit_teacher_in1k.py': 'accuracy/top1',
    'configs/stvit_deit_s_25tokens_in1k.py': 'accuracy/top1',
    'configs/stvit_deit_s_36tokens_in1k.py': 'accuracy/top1',
    'configs/stvit_deit_s_49tokens_in1k.py': 'accuracy/top1',
    'configs/stvit_r_swin_s_authors_in1k.py': 'accuracy/top1',
    'configs/stvit_r_swin_b_authors_in1k.py': 'accuracy/top1',
    'configs/_base_/swin_s_in1k.py': 'accuracy/top1',
    'configs/_base_/deit_s_in1k.py': 'accuracy/top1',
    'configs/_base_/swin_s_cascade_mask_rcnn_3x_coco.py': 'coco/segm_mAP',
    'configs/_base_/swin_s_upernet_ade20k.py': 'mIoU',
    'configs/_base_/swin_t_k400.py': 'acc/top1',
    'configs/stvit_r_swin_s_coco.py': 'coco/segm_mAP',
    'configs/stvit_r_swin_b_coco.py': 'coco/segm_mAP',
    'configs/stvit_r_swin_s_nodumbbell_coco.py': 'coco/segm_mAP',
    'configs/stvit_r_swin_s_reuse_coco.py': 'coco/segm_mAP',
    'configs/_base_/swin_b_cascade_mask_rcnn_3x_coco.py': 'coco/segm_mAP',
    'configs/stvit_r_swin_s_in1k.py': 'accuracy/top1',
    'configs/stvit_r_swin_b_in1k.py': 'accuracy/top1',
    'configs/stvit_r_swin_s_upernet_ade20k.py': 'mIoU',
    'configs/stvit_swin_t_in1k.py': 'accuracy/top1',
    'configs/stvit_swin_s_in1k.py': 'accuracy/top1',
    'configs/stvit_swin_b_in1k.py': 'accuracy/top1',
    'configs/stvit_swin_t_k400.py': 'acc/top1',
    'configs/stvit_swin_s_k400.py': 'acc/top1',
    'configs/stvit_deit_t_in1k.py': 'accuracy/top1',
    'configs/stvit_deit_s_in1k.py': 'accuracy/top1',
    'configs/stvit_deit_b_in1k.py': 'accuracy/top1',
    'configs/hvit_pvtv2_b1_tinyimagenet.py': 'accuracy/top1',
    'configs/hvit_deit_s_in1k.py': 'accuracy/top1',
    'configs/hvit_swin_t_in1k.py': 'accuracy/top1',
    'configs/hvit_deit_s_cifar100_384.py': 'accuracy/top1',
    'configs/hvit_deit_s_dogs_448.py': 'accuracy/top1',
    'configs/hvit_swin_t_cifar100_384.py': 'accuracy/top1',
    'configs/hvit_swin_t_dogs_448.py': 'accuracy/top1',
    'configs/hvit_pvtv2_b1_cifar100_384.py': 'accuracy/top1',
    'configs/hvit_pvtv2_b1_dogs_448.py': 'accuracy/top1',
    'configs/integrated_deit_t_in1k.py': 'accuracy/top1',
    'configs/integrated_deit_s_in1k.py': 'accuracy/top1',
    'configs/integrated_deit_b_in1k.py': 'accuracy/top1',
    'configs/dgssa_swin_t_in1k.py': 'accuracy/top1',
    'configs/dgssa_swin_s_in1k.py': 'accuracy/top1',
    'configs/dgssa_swin_b_in1k.py': 'accuracy/top1',
    'configs/dgssa_swin_s_coco.py': 'coco/segm_mAP',
    'configs/dgssa_swin_s_upernet_ade20k.py': 'mIoU',
    'configs/sait_deit_s_m07_in1k.py': 'accuracy/top1',
    'configs/sait_deit_s_v05_in1k.py': 'accuracy/top1',
    'configs/asvit_deit_s_in1k.py': 'accuracy/top1',
    'configs/asvit_deit_t_in1k.py': 'accuracy/top1',
    'configs/pruned_deit_s_upernet_ade20k.py': 'mIoU',
    'configs/tome_deit_s_in1k.py': 'accuracy/top1',
    'configs/tome_swin_t_coco.py': 'coco/segm_mAP',
}

#: recipes with ``custom_hooks``: SaiT's DenseSparseAlternateHook, DeiT-B's
#: EMAHook
HOOKED = ('configs/sait_deit_s_m07_in1k.py', 'configs/sait_deit_s_v05_in1k.py',
          'configs/stvit_deit_b_in1k.py', 'configs/sait_deit_s_d042_in1k.py',
          'configs/sait_deit_s_m07_deit_teacher_in1k.py',
          'configs/sait_deit_s_v05_dino_in1k.py')

# an untrained detector scores below the recipe's threshold; keep its boxes
# so that the COCO metric has something to evaluate
PREDICT_ALL = {
    'configs/_base_/swin_s_cascade_mask_rcnn_3x_coco.py':
    dict(model=dict(test_cfg=dict(rcnn=dict(score_thr=0.0)))),
    'configs/stvit_r_swin_s_coco.py':
    dict(model=dict(test_cfg=dict(rcnn=dict(score_thr=0.0)))),
    'configs/stvit_r_swin_b_coco.py':
    dict(model=dict(test_cfg=dict(rcnn=dict(score_thr=0.0)))),
    'configs/stvit_r_swin_s_nodumbbell_coco.py':
    dict(model=dict(test_cfg=dict(rcnn=dict(score_thr=0.0)))),
    'configs/stvit_r_swin_s_reuse_coco.py':
    dict(model=dict(test_cfg=dict(rcnn=dict(score_thr=0.0)))),
    'configs/_base_/swin_b_cascade_mask_rcnn_3x_coco.py':
    dict(model=dict(test_cfg=dict(rcnn=dict(score_thr=0.0)))),
    'configs/dgssa_swin_s_coco.py':
    dict(model=dict(test_cfg=dict(rcnn=dict(score_thr=0.0)))),
    'configs/tome_swin_t_coco.py':
    dict(model=dict(test_cfg=dict(rcnn=dict(score_thr=0.0)))),
}


#: left out of `make test-fast`: the detectors and upstream segmentors (over
#: 10 s each), and the size variants of recipes whose tiny models are the same
#: as those of a recipe in the fast subset (one recipe per method and task
#: stays there)
SLOW = {
    'configs/_base_/swin_s_cascade_mask_rcnn_3x_coco.py',
    'configs/tome_swin_t_coco.py',
    'configs/_base_/swin_b_cascade_mask_rcnn_3x_coco.py',
    'configs/stvit_r_swin_s_coco.py',
    'configs/stvit_r_swin_b_coco.py',
    'configs/stvit_r_swin_s_nodumbbell_coco.py',
    'configs/stvit_r_swin_s_reuse_coco.py',
    'configs/dgssa_swin_s_coco.py',
    'configs/_base_/swin_s_upernet_ade20k.py',
    'configs/dgssa_swin_s_upernet_ade20k.py',
    'configs/_base_/swin_s_in1k.py',
    'configs/_base_/swin_t_k400.py',
    'configs/stvit_swin_t_k400.py',
    'configs/stvit_swin_s_in1k.py',
    'configs/stvit_swin_b_in1k.py',
    'configs/stvit_r_swin_b_in1k.py',
    'configs/stvit_deit_s_in1k.py',
    'configs/stvit_deit_b_in1k.py',
    'configs/integrated_deit_s_in1k.py',
    'configs/integrated_deit_b_in1k.py',
    'configs/dgssa_swin_s_in1k.py',
    'configs/dgssa_swin_b_in1k.py',
    'configs/hvit_deit_s_dogs_448.py',
    'configs/hvit_swin_t_dogs_448.py',
    'configs/hvit_pvtv2_b1_dogs_448.py',
    'configs/sait_deit_s_v05_in1k.py',
    'configs/asvit_deit_s_in1k.py',
}


def _params(configs):
    return [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c
            for c in configs]


@pytest.mark.parametrize('config', _params(sorted(TINY_MODELS)))
def test_recipe_train_step_and_predict(config, tmp_path, tiny_data_dir):
    cfg = tiny_config(config, tmp_path / 'work', tiny_data_dir)
    cfg.merge_from_dict(PREDICT_ALL.get(config, {}))
    cfg.randomness = dict(seed=0)  # drop path decides what gets no update
    # the hooks of these recipes run in test_recipe_hooks_run_in_the_runner
    # (the tiny overlay adds its StepSeedHook to every run; the hMHSA
    # recipes' MinLRAverageHook runs in tests/test_min_lr_average_hook.py)
    recipe_hooks = [h for h in cfg.get('custom_hooks') or []
                    if h['type'] not in ('mmvitaccel.StepSeedHook',
                                         'mmvitaccel.MinLRAverageHook')]
    assert bool(recipe_hooks) == (config in HOOKED)
    updates = {}
    losses, preds, metrics = train_and_predict_one_batch(cfg, updates)
    assert losses and all(math.isfinite(float(v)) for v in losses.values())
    assert_updated(updates)
    assert len(preds) == cfg.test_dataloader.batch_size
    assert EXPECTED_METRIC[config] in metrics




class _Record(Hook):
    """Records, in each training iteration, whether the backbone prunes
    (before it) and the trainable parameters (after it)."""

    def __init__(self):
        self.prune, self.params = [], []

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        self.prune.append(getattr(runner.model.backbone, 'prune', None))

    def after_train_iter(self, runner, batch_idx, data_batch=None,
                         outputs=None):
        self.params.append(trainable_state(runner.model))


def _dense_then_sparse(runner, record):
    # DenseSparseAlternateHook: a dense epoch, a sparse one, pruning after
    assert record.prune == [False, True]
    assert runner.model.backbone.prune


def _moving_average(runner, record):
    # EMAHook: the average starts as the weights after the first step, then
    # moves toward each new step's weights by its momentum
    (hook, ) = [h for h in runner.hooks if type(h).__name__ == 'EMAHook']
    ema = dict(hook.ema_model.module.named_parameters())
    first, second = record.params
    momentum = hook.ema_model.momentum
    for name, p in second.items():  # bit-exact: the same lerp kernel
        torch.testing.assert_close(ema[name], first[name].lerp(p, momentum),
                                   rtol=0, atol=0)
    assert any(not torch.equal(ema[n], second[n]) for n in second)


#: what each recipe's hooks do, checked after two epochs of one batch
HOOK_EFFECTS = {
    'configs/sait_deit_s_m07_in1k.py': _dense_then_sparse,
    'configs/sait_deit_s_v05_in1k.py': _dense_then_sparse,
    'configs/sait_deit_s_d042_in1k.py': _dense_then_sparse,
    'configs/sait_deit_s_m07_deit_teacher_in1k.py': _dense_then_sparse,
    'configs/sait_deit_s_v05_dino_in1k.py': _dense_then_sparse,
    'configs/stvit_deit_b_in1k.py': _moving_average,
}


@pytest.mark.parametrize('config', _params(HOOKED))
def test_recipe_hooks_run_in_the_runner(config, tmp_path, tiny_data_dir):
    """The recipe's own training loop: two epochs of one batch each, so that
    epoch and iteration hooks act; no validation."""
    cfg = tiny_config(config, tmp_path / 'work', tiny_data_dir, max_epochs=2)
    cfg.train_dataloader.dataset.indices = cfg.train_dataloader.batch_size
    cfg.val_dataloader = cfg.val_cfg = cfg.val_evaluator = None
    cfg.randomness = dict(seed=0)
    runner = Runner.from_cfg(cfg)
    record = _Record()
    runner.register_hook(record)
    before = trainable_state(runner.model)
    runner.train()
    assert runner.iter == 2
    HOOK_EFFECTS[config](runner, record)
    assert_updated(parameter_updates(runner.model, before))
