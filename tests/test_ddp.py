"""Distributed training on CPU (gloo): the ``pytorch`` launcher through
``tools/dist_train.sh`` (torchrun), and the ``slurm`` launcher as far as it
can run without slurm (its environment variables set by hand), against a
1-process run with the same global batch."""
import os
import os.path as osp
import socket
import subprocess
import sys

import pytest
import torch
from mmengine.config import Config

import mmvitaccel  # noqa: F401
from mmvitaccel import compat
from mmvitaccel.tiny import tinyfy_config

from .tolerance import rounding_tol
from .utils import REPO, TINY_MODELS


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _env():
    env = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS='1')
    env.pop('VENV', None)
    return env


def _cls_config(tmp_path):
    """Tiny SaiT (token pruning, TIS distillation from a teacher, the
    dense/sparse hook) with nothing random left in the data or the model,
    so that 1 and 2 processes must agree."""
    cfg = Config.fromfile(osp.join(REPO, 'configs/sait_deit_s_m07_in1k.py'))
    cfg.merge_from_dict(TINY_MODELS['configs/sait_deit_s_m07_in1k.py'])
    cfg.model.teacher = dict(config=dict(
        type='ImageClassifier',
        backbone=dict(type='VisionTransformer', img_size=224, patch_size=16,
                      arch=dict(embed_dims=64, num_layers=2, num_heads=2,
                                feedforward_channels=128)),
        head=dict(type='VisionTransformerClsHead', num_classes=1000, in_channels=64)))
    cfg.model.train_cfg = None  # no Mixup/CutMix
    cfg.model.backbone.drop_path_rate = 0.
    cfg.train_dataloader.dataset.pipeline = [
        dict(type='LoadImageFromFile'), dict(type='Resize', scale=224), dict(type='PackInputs')]
    cfg.train_dataloader.dataset.indices = 8
    for name in ('val_dataloader', 'test_dataloader'):
        cfg[name].dataset.indices = 2
    # SGD keeps the update linear in the averaged gradient; AdamW's first
    # steps divide by sqrt(v), which turns float noise in near-zero
    # gradients into differences of a fraction of the learning rate
    cfg.optim_wrapper = dict(type='OptimWrapper', clip_grad=dict(max_norm=5.0),
                             optimizer=dict(type='SGD', lr=0.05, momentum=0.9,
                                            weight_decay=0.05))
    path = tmp_path / 'cls.py'
    cfg.dump(str(path))
    return str(path)


def _tiny_args(work_dir, data_dir, batch, *extra):
    return ['--tiny', '--work-dir', str(work_dir), '--cfg-options', 'tiny.max_epochs=2',
            f'tiny.batch_size={batch}', f'tiny.data_root={data_dir}',
            'env_cfg.dist_cfg.backend=gloo', *extra]


def _state(work_dir):
    ckpt = torch.load(osp.join(work_dir, 'epoch_2.pth'), map_location='cpu', weights_only=False)
    return ckpt['state_dict']


#: how far float32 rounding alone can move a parameter between a 1-process
#: and a 2-process run of ``_cls_config``: 2 epochs x 2 batches = 4 SGD
#: steps of lr 0.05, momentum 0.9, so a gradient difference dg moves a
#: parameter by <= 0.05 (1 + 1.9 + 2.71 + 3.44) dg = 0.45 dg; dg is the
#: rounding of the sums over the batch (4 images x 197 tokens, split over
#: the ranks otherwise) of gradients clipped to norm 5: 2 n u 5 with
#: n = 788. (A gradient summed over the ranks instead of averaged moves
#: parameters by 0.45 |g|, above this for any |g| > 5e-4.)
DDP_ATOL = 0.05 * (1 + 1.9 + 2.71 + 3.44) * rounding_tol(torch.float32,
                                                          4 * 197, 5.0)


def _assert_close_states(a, b, atol):
    assert a.keys() == b.keys()
    worst = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
    assert worst <= atol, f'max difference {worst}'


@pytest.mark.slow
def test_two_processes_equal_one_for_classification(tmp_path, tiny_data_dir):
    """2 x batch 2 (gloo, torchrun) == 1 x batch 4 after two epochs (one
    dense, one with pruned tokens): gradients are averaged over the ranks
    (and clipped after averaging), nothing is unused, the teacher is neither
    wrapped nor synced. The tolerance covers the order of the float32
    sums only (SGD with momentum, see ``_cls_config`` and ``DDP_ATOL``)."""
    config = _cls_config(tmp_path)
    one = subprocess.run([sys.executable, 'tools/train.py', config,
                          *_tiny_args(tmp_path / 'one', tiny_data_dir, 4)],
                         cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    env = dict(_env(), PORT=str(_free_port()))
    two = subprocess.run(['bash', 'tools/dist_train.sh', config, '2',
                          *_tiny_args(tmp_path / 'two', tiny_data_dir, 2)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    assert 'sparse tokens' in two.stdout + two.stderr
    _assert_close_states(_state(tmp_path / 'one'), _state(tmp_path / 'two'), atol=DDP_ATOL)

    # slurm's path: what srun would export, on one node, without scontrol
    port = str(_free_port())
    procs = []
    for rank in range(2):
        env = dict(_env(), SLURM_PROCID=str(rank), SLURM_NTASKS='2',
                   SLURM_NODELIST='localhost', MASTER_ADDR='127.0.0.1', MASTER_PORT=port)
        procs.append(subprocess.Popen(
            [sys.executable, 'tools/train.py', config, '--launcher', 'slurm',
             *_tiny_args(tmp_path / 'slurm', tiny_data_dir, 2)],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
    # the same two-rank computation, launched otherwise: bit-exact (a sum
    # of two ranks does not depend on its order)
    _assert_close_states(_state(tmp_path / 'two'), _state(tmp_path / 'slurm'), atol=0.)


def test_cpu_launcher_skips_set_device_and_nccl(monkeypatch):
    """Without CUDA, mmengine's initialiser runs with gloo and without
    torch.cuda.set_device; with CUDA it is left alone."""
    calls = []

    def init(backend, **kwargs):
        calls.append(backend)
        torch.cuda.set_device(0)  # what mmengine does

    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    wrapped = compat._cpu_safe_init(init)
    with pytest.warns(UserWarning, match='gloo'):
        wrapped('nccl')
    wrapped('gloo')
    assert calls == ['gloo', 'gloo']
    from mmengine.dist import utils as dist_utils
    assert getattr(dist_utils._init_dist_pytorch, '_mmvitaccel_cpu_safe', False)
    assert getattr(dist_utils._init_dist_slurm, '_mmvitaccel_cpu_safe', False)


def test_dist_scripts_use_the_project_interpreter(tmp_path):
    """The launch scripts run $PYTHON, else the project's .venv, not a bare
    `python` from PATH."""
    fake = tmp_path / 'py'
    fake.write_text('#!/usr/bin/env bash\necho "RAN $*"\n')
    fake.chmod(0o755)
    env = dict(os.environ, PYTHON=str(fake), PATH='/usr/bin:/bin')
    for script, args in (('dist_train.sh', ['c.py', '2']), ('dist_test.sh', ['c.py', 'k.pth', '2'])):
        out = subprocess.run(['bash', osp.join(REPO, 'tools', script), *args], env=env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith('RAN -m torch.distributed.run')
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHON', 'VENV')}
    out = subprocess.run(['bash', '-c', f'source {REPO}/tools/python.sh; echo $PYTHON'],
                         env=env, capture_output=True, text=True, timeout=60)
    venv_python = osp.join(REPO, '.venv', 'bin', 'python')
    assert out.stdout.strip() == (venv_python if osp.exists(venv_python) else 'python3')


def _det_config(tmp_path):
    """Tiny STViT-R Cascade Mask R-CNN on 4 images, no random transform."""
    cfg = Config.fromfile(osp.join(REPO, 'configs/stvit_r_swin_s_coco.py'))
    cfg.merge_from_dict(TINY_MODELS['configs/stvit_r_swin_s_coco.py'])
    cfg.model.backbone.drop_path_rate = 0.
    cfg.train_dataloader.dataset.pipeline = [
        dict(type='LoadImageFromFile'), dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
        dict(type='Resize', scale=(1333, 800), keep_ratio=True), dict(type='PackDetInputs')]
    cfg.train_dataloader.dataset.indices = 4
    cfg.train_dataloader.dataset.filter_cfg = None
    # plain SGD: the update is the (averaged) gradient itself, not its sign
    cfg.optim_wrapper = dict(type='OptimWrapper',
                             optimizer=dict(type='SGD', lr=0.01, momentum=0., weight_decay=0.))
    for name in ('val_dataloader', 'test_dataloader'):
        cfg[name].dataset.indices = 1
    return cfg


@pytest.mark.slow
def test_two_processes_match_one_for_detection(tmp_path, tiny_data_dir):
    """One step of 2 x batch 2 against 1 x batch 4 from the same weights.

    Not bit-exact, by mmdet's design: the RPN and R-CNN samplers draw their
    anchors and RoIs at random (other draws per rank), and each rank
    normalises its losses by its own number of samples. So the test states
    a tolerance on the weight update: the two updates point the same way
    (cosine > 0.9) and have the same size within 10%.
    """
    from mmengine.registry import MODELS, init_default_scope
    cfg = _det_config(tmp_path)
    init_default_scope('mmdet')
    torch.manual_seed(0)
    model = MODELS.build(tinyfy_config(cfg, data_root=str(tiny_data_dir)).model)
    model.init_weights()
    init = {k: v.clone() for k, v in model.state_dict().items()}
    torch.save(dict(state_dict=init, meta=dict()), tmp_path / 'init.pth')
    cfg.load_from = str(tmp_path / 'init.pth')
    config = str(tmp_path / 'det.py')
    cfg.dump(config)

    def args(work, batch):
        return ['--tiny', '--work-dir', str(tmp_path / work), '--cfg-options',
                'tiny.max_epochs=1', f'tiny.batch_size={batch}', f'tiny.data_root={tiny_data_dir}',
                'env_cfg.dist_cfg.backend=gloo', 'train_dataloader.sampler.shuffle=False']

    one = subprocess.run([sys.executable, 'tools/train.py', config, *args('one', 4)],
                         cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    env = dict(_env(), PORT=str(_free_port()))
    two = subprocess.run(['bash', 'tools/dist_train.sh', config, '2', *args('two', 2)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]

    def update(work):
        ckpt = torch.load(tmp_path / work / 'epoch_1.pth', map_location='cpu', weights_only=False)
        assert ckpt['meta']['iter'] == 1
        state = ckpt['state_dict']
        return torch.cat([(state[k].float() - init[k].float()).flatten()
                          for k in init if init[k].is_floating_point()])

    a, b = update('one'), update('two')
    assert a.norm() > 0
    cosine = torch.nn.functional.cosine_similarity(a, b, dim=0).item()
    assert cosine > 0.9, cosine
    assert abs(b.norm() / a.norm() - 1) < 0.1
