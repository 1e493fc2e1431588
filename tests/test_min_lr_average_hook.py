"""MinLRAverageHook: the hMHSA/cFFN paper's accuracy, averaged over the
final epochs at the minimum learning rate."""
import json
import os.path as osp

import pytest
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.runner import Runner

from mmvitaccel.engine import MinLRAverageHook

from .utils import REPO, tiny_config

HVIT_CONFIGS = ('hvit_pvtv2_b1_tinyimagenet.py', 'hvit_deit_s_in1k.py',
                'hvit_swin_t_in1k.py', 'hvit_deit_s_cifar100_384.py',
                'hvit_deit_s_dogs_448.py', 'hvit_swin_t_cifar100_384.py',
                'hvit_swin_t_dogs_448.py', 'hvit_pvtv2_b1_cifar100_384.py',
                'hvit_pvtv2_b1_dogs_448.py')


class _Metrics(Hook):
    """Each validation's metrics, by epoch."""

    def __init__(self):
        self.by_epoch = {}

    def after_val_epoch(self, runner, metrics=None):
        self.by_epoch[runner.epoch] = dict(metrics)


def test_logged_average_is_the_mean_of_the_final_epochs(tmp_path,
                                                         tiny_data_dir):
    cfg = tiny_config('configs/hvit_deit_s_in1k.py', tmp_path / 'work',
                      tiny_data_dir, max_epochs=4)
    cfg.train_dataloader.dataset.indices = cfg.train_dataloader.batch_size
    cfg.val_dataloader.dataset.indices = 8
    cfg.val_dataloader.batch_size = 4
    cfg.train_cfg.val_interval = 1
    (hook_cfg, ) = [h for h in cfg.custom_hooks
                    if h['type'] == 'mmvitaccel.MinLRAverageHook']
    hook_cfg['epochs'] = 2
    # a cosine over epochs 0-1 that sets eta_min at step 2 (end is one
    # past it), then the minimum LR for epochs 2-3 (1-based: 3, 4)
    cfg.param_scheduler = [
        dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=0,
             end=3, T_max=2)
    ]
    runner = Runner.from_cfg(cfg)
    record = _Metrics()
    runner.register_hook(record)
    runner.train()
    assert sorted(record.by_epoch) == [1, 2, 3, 4]
    final = [record.by_epoch[e]['accuracy/top1'] for e in (3, 4)]
    # exact: the hook sums the same Python floats in the same order, JSON
    # keeps a float's every bit, and the cosine's last step multiplies
    # (lr - eta_min) by 1 + cos(pi) = 0, which leaves eta_min itself
    mean = sum(final) / 2
    (hook, ) = [h for h in runner.hooks if isinstance(h, MinLRAverageHook)]
    assert hook.average() == mean
    logged = runner.message_hub.get_scalar(
        'min_lr_average/accuracy/top1').current()
    assert logged == mean
    with open(osp.join(runner.work_dir, 'min_lr_average.json')) as f:
        saved = json.load(f)
    assert saved['average'] == mean
    assert [r['epoch'] for r in saved['epochs']] == [3, 4]
    assert [r['value'] for r in saved['epochs']] == final
    assert saved['constant_lr'] and saved['epochs'][0]['lr'] == 1e-5


def test_records_survive_a_checkpoint():
    hook = MinLRAverageHook(epochs=3)
    hook.records = [dict(epoch=8, value=50.0, lr=1e-5)]
    checkpoint = {}
    hook.before_save_checkpoint(None, checkpoint)
    again = MinLRAverageHook(epochs=3)
    again.after_load_checkpoint(None, checkpoint)
    assert again.records == hook.records and again.average() == 50.0


def test_hook_arguments_are_checked():
    with pytest.raises(ValueError, match='epochs must be a positive int'):
        MinLRAverageHook(epochs=0)
    with pytest.raises(ValueError, match='metric must be'):
        MinLRAverageHook(metric='')
    with pytest.raises(ValueError, match='out_file'):
        MinLRAverageHook(out_file=3)


def _epoch_lrs(cfg):
    """The LR of each epoch under the config's schedulers (warm-up
    counted per epoch: the end of the schedule does not depend on it)."""
    import torch
    from mmengine.registry import PARAM_SCHEDULERS
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)],
                                lr=cfg.optim_wrapper.optimizer.lr)
    schedulers = []
    for sched in cfg.param_scheduler:
        sched = {k: v for k, v in sched.items()
                 if k not in ('convert_to_iter_based', '_scope_')}
        schedulers.append(PARAM_SCHEDULERS.build(
            dict(sched, optimizer=optimizer)))
    lrs = []
    for _ in range(cfg.train_cfg.max_epochs):
        lrs.append(optimizer.param_groups[0]['lr'])
        for sched in schedulers:
            sched.step()
    return lrs


@pytest.mark.parametrize('config', HVIT_CONFIGS)
def test_hvit_recipes_end_with_10_epochs_at_the_minimum_lr(config):
    cfg = Config.fromfile(osp.join(REPO, 'configs', config))
    (hook, ) = [h for h in cfg.custom_hooks
                if h['type'] == 'mmvitaccel.MinLRAverageHook']
    assert hook['epochs'] == 10 and hook['metric'] == 'accuracy/top1'
    assert cfg.train_cfg.val_interval == 1
    lrs = _epoch_lrs(cfg)
    eta_min = cfg.param_scheduler[-1]['eta_min']
    # exact: the cosine's last step scales (lr - eta_min) by 1 + cos(pi) = 0
    assert lrs[-10:] == [eta_min] * 10
    assert lrs[-11] > eta_min * 1.0001  # the cosine runs until then
