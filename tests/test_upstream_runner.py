"""A config written by ``tools/accelerate.py`` runs under upstream tools.

The written file carries what it needs (``custom_imports`` and the
checkpoint check in ``custom_hooks``), so mmengine's ``Runner.from_cfg``
alone (what mmpretrain's, mmdet's and mim's ``train.py`` do) reads an
upstream checkpoint through our readers (DGSSA's V from QKV, hMHSA's halved
Q and K), trains and tests, and ends with the same weights as our
``tools/train.py``. Each run is a fresh interpreter: the upstream one
imports no tool of ours and applies no fix of :mod:`mmvitaccel.compat`.
"""
import os.path as osp
import subprocess
import sys
import textwrap

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import MODELS, DefaultScope, init_default_scope

from .utils import REPO

#: a user's configs, small enough for CPU steps: a Swin classifier (for
#: DGSSA) and a DeiT (for hMHSA, which needs an even head count)
USER_CONFIGS = dict(
    dgssa='''
_base_ = 'mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py'
model = dict(
    backbone=dict(arch=dict(_delete_=True, embed_dims=32,
                            depths=[1, 1, 6, 1], num_heads=[1, 2, 4, 8])),
    head=dict(in_channels=256))
''',
    hvit='''
_base_ = 'mmpretrain::deit/deit-small_4xb256_in1k.py'
model = dict(
    backbone=dict(arch=dict(_delete_=True, embed_dims=32, num_layers=4,
                            num_heads=4, feedforward_channels=64)),
    head=dict(in_channels=32))
''')

#: mmengine's runner, as upstream tools build it; prints the last
#: checkpoint's path and the test metrics
UPSTREAM_RUN = textwrap.dedent('''
    import json, sys
    from mmengine.config import Config
    from mmengine.runner import Runner
    cfg = Config.fromfile(sys.argv[1])
    cfg.work_dir = sys.argv[2]
    runner = Runner.from_cfg(cfg)
    runner.train()
    metrics = runner.test()
    print(json.dumps(dict(metrics={k: float(v) for k, v in metrics.items()})))
''')


def _run(args, cwd):
    proc = subprocess.run([sys.executable] + args, cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout + proc.stderr


def _last_weights(work_dir):
    with open(osp.join(work_dir, 'last_checkpoint')) as f:
        path = f.read().strip()
    return torch.load(path, map_location='cpu',
                      weights_only=False)['state_dict']


@pytest.mark.slow
@pytest.mark.parametrize('method,options', [
    ('dgssa', ["static_init='uniform'"]),
    ('hvit', []),
])
def test_a_written_config_trains_and_tests_under_mmengines_runner(
        method, options, tmp_path, tiny_data_dir):
    from mmvitaccel.tiny import tinyfy_config

    # the user's config and their upstream classifier's checkpoint
    user = tmp_path / 'user.py'
    user.write_text(USER_CONFIGS[method])
    cfg = Config.fromfile(str(user))
    saved = DefaultScope._instance_dict.copy()
    init_default_scope('mmpretrain')
    try:
        upstream = MODELS.build(cfg.model).state_dict()
    finally:
        DefaultScope._instance_dict.clear()
        DefaultScope._instance_dict.update(saved)
    checkpoint = str(tmp_path / 'user.pth')
    torch.save(dict(state_dict=upstream, meta=dict()), checkpoint)
    # the switch, as a user runs it
    written = str(tmp_path / f'{method}.py')
    _run([osp.join(REPO, 'tools', 'accelerate.py'), str(user), '--method',
          method, '--out', written, '--checkpoint', checkpoint] +
         (['--options'] + options if options else []), cwd=REPO)
    assert 'mmvitaccel.CheckpointCheckHook' in open(written).read()
    # this machine's scale: tiny data, one short epoch (the harness's
    # overlay, written out as a plain config file)
    run = tinyfy_config(Config.fromfile(written),
                        data_root=str(tiny_data_dir), max_epochs=1)
    run_file = str(tmp_path / 'run.py')
    run.dump(run_file)
    assert 'runner_type' not in Config.fromfile(run_file)

    upstream_dir = str(tmp_path / 'upstream')
    log = _run(['-c', UPSTREAM_RUN, run_file, upstream_dir], cwd=tmp_path)
    assert 'read as its host\'s layout' in log, log[-3000:]
    assert 'accuracy/top1' in log.strip().splitlines()[-1]
    ours_dir = str(tmp_path / 'ours')
    _run([osp.join(REPO, 'tools', 'train.py'), run_file, '--work-dir',
          ours_dir], cwd=tmp_path)

    theirs, ours = _last_weights(upstream_dir), _last_weights(ours_dir)
    assert sorted(theirs) == sorted(ours)
    for key in ours:  # the same process on the same data: bit for bit
        assert torch.equal(theirs[key], ours[key]), key
