"""The DGSSA/GLAD and hMHSA/cFFN recipes resolve to the papers' settings."""
import os.path as osp

import pytest
from mmengine.config import Config

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


def _cfg(name):
    return Config.fromfile(osp.join(REPO, 'configs', name))


@pytest.mark.parametrize('size', ['t', 's', 'b'])
def test_integrated_deit_trains_at_the_papers_batch_and_regularization(size):
    """"a batch size of 4096 for the GLAD-based and integrated pipeline",
    lr 1e-3, 5 warm-up epochs from 1e-6, cosine to 1e-5, 300 epochs, and
    DeiT's drop path 0.1."""
    cfg = _cfg(f'integrated_deit_{size}_in1k.py')
    gpus = 8  # the paper: "NVIDIA V100 8 GPUs"
    assert cfg.train_dataloader.batch_size * gpus == 4096
    assert cfg.auto_scale_lr.base_batch_size == 4096
    assert cfg.optim_wrapper.optimizer.lr == 1e-3
    assert cfg.optim_wrapper.optimizer.weight_decay == 0.05
    assert cfg.model.backbone.drop_path_rate == 0.1
    warmup, cosine = cfg.param_scheduler
    assert warmup.type == 'LinearLR' and warmup.end == 5
    # float64: two decimal factors, their product and 1e-6 each round by
    # u = 2^-53 relative at most
    assert warmup.start_factor * cfg.optim_wrapper.optimizer.lr == \
        pytest.approx(1e-6, rel=4 * 2**-53, abs=0)
    assert cosine.type == 'CosineAnnealingLR' and cosine.begin == 5
    assert cosine.eta_min == 1e-5
    assert cfg.train_cfg.max_epochs == 300


@pytest.mark.parametrize('size', ['t', 's', 'b'])
def test_dgssa_swin_configs_leave_block_0_dynamic(size):
    cfg = _cfg(f'dgssa_swin_{size}_in1k.py')
    assert cfg.model.backbone.get('static_start', 1) == 1
    assert cfg.model.backbone.static_blocks == {'t': 6}.get(size, 12)
