"""tools/dgssa_init.py and tools/glad_search.py end to end on tiny data, and
Integrated-DeiT training from the init with token distillation."""
import os
import os.path as osp
import re
import subprocess
import sys

import pytest
import torch
from mmdet.models.backbones import SwinTransformer
from mmpretrain.models import VisionTransformer

import mmvitaccel  # noqa: F401
from mmvitaccel.models import DGSSASwinTransformer, DGSSAVisionTransformer

from .tolerance import assert_equal, assert_rounding_close
from .utils import REPO

ARCH = dict(embed_dims=64, num_layers=8, num_heads=4, feedforward_channels=128)
DEIT = '''
_base_ = '{repo}/configs/integrated_deit_s_in1k.py'
arch = dict(_delete_=True, embed_dims=64, num_layers=8, num_heads=4,
            feedforward_channels=128)
# 112x112 images (tiny.scale=0.5): 50 tokens
model = dict(
    backbone=dict(arch=arch, img_size=112, glad_tokens=(37, 21, 9),
                  init_cfg=dict(checkpoint='{init}')),
    teacher=dict(arch=arch, img_size=112, init_cfg=dict(checkpoint='{host}')),
    teacher_head=dict(in_channels=64, init_cfg=None),
    head=dict(in_channels=64))
'''
SWIN = '''
_base_ = '{repo}/configs/dgssa_swin_t_in1k.py'
model = dict(
    backbone=dict(arch=None, embed_dims=32, depths=[2, 2, 2, 1],
                  num_heads=[1, 2, 4, 8], static_blocks=3, init_cfg=None),
    head=dict(in_channels=256))
'''


def run(*args):
    proc = subprocess.run([sys.executable, *args], cwd=REPO,
                          capture_output=True, text=True,
                          env=dict(os.environ, PYTHONWARNINGS='ignore'))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


@pytest.mark.slow
def test_dgssa_init_glad_search_and_training(tmp_path, tiny_data_dir):
    torch.manual_seed(0)
    host = VisionTransformer(arch=ARCH, img_size=112, patch_size=16)
    host.init_weights()
    host_path = str(tmp_path / 'host.pth')
    torch.save(dict(state_dict={f'backbone.{k}': v
                                for k, v in host.state_dict().items()}),
               host_path)
    init_path = str(tmp_path / 'dgssa_init.pth')
    config = tmp_path / 'integrated_tiny.py'
    config.write_text(DEIT.format(repo=REPO, init=init_path, host=host_path))
    tiny = ['--tiny', '--cfg-options', f'tiny.data_root={tiny_data_dir}',
            'tiny.scale=0.5', 'train_dataloader.dataset.indices=4',
            'val_dataloader.dataset.indices=2']

    out = run('tools/dgssa_init.py', str(config), '--checkpoint', host_path,
              '--out', init_path, '--num-images', '3', '--batch-size', '2',
              *tiny)
    assert 'difference metric over 3 images' in out
    rows = re.findall(r'^layers\.(\d+)\.attn\s+([\d.]+)', out, re.M)
    assert [int(r[0]) for r in rows] == list(range(8))
    assert all(float(r[1]) > 0 for r in rows)
    assert osp.getsize(str(tmp_path / 'dgssa_init.png')) > 1000
    state = torch.load(init_path)['state_dict']
    for i in range(8):
        logits = state[f'backbone.layers.{i}.attn.static_logits']
        assert logits.shape == (4, 50, 50)
        # float32: the tool's row sum and this one (50 terms each), its
        # division, and exp of a rounded log, u |log p| <= u |log 1e-6| (14)
        assert_rounding_close(logits.exp().sum(-1), torch.ones(4, 50),
                              2 * 50 + 1 + 14, 1.)
    # the DGSSA backbone takes its static logits (and V, Proj) from it
    ours = DGSSAVisionTransformer(
        arch=ARCH, img_size=112, glad_tokens=(37, 21, 9),
        init_cfg=dict(type='Pretrained', checkpoint=init_path))
    ours.init_weights()
    assert not ours.load_report['missing'] and \
        not ours.load_report['unused']
    assert_equal(ours.layers[2].attn.static_logits,  # loaded as saved
                 state['backbone.layers.2.attn.static_logits'])

    out = run('tools/glad_search.py', str(config), '--checkpoint', host_path,
              '--num-images', '2', '--batch-size', '2', '--eta', '0.5',
              '--step', '2', *tiny)
    ratio = float(re.search(r'AM-optimal architecture \(AM [\d.]+, FLOPs '
                            r'ratio ([\d.]+)\)', out).group(1))
    assert ratio <= 0.5
    assert "the config's architecture: GLAD at [3, 5, 7]" in out
    assert 'glad_tokens=(' in out and 'static_layers=(1, 2)' in out

    # Integrated-DeiT trains from the init, with token distillation
    work = str(tmp_path / 'work')
    out = run('tools/train.py', str(config), '--work-dir', work, *tiny,
              'tiny.max_epochs=1')
    assert 'loss_glad' in out and 'loss_kd' in out
    assert osp.isfile(osp.join(work, 'epoch_1.pth'))


@pytest.mark.slow
def test_dgssa_init_on_swin(tmp_path, tiny_data_dir):
    torch.manual_seed(0)
    host = SwinTransformer(embed_dims=32, depths=[2, 2, 2, 1],
                           num_heads=[1, 2, 4, 8])
    host.init_weights()
    host_path = str(tmp_path / 'swin.pth')
    torch.save(dict(state_dict={f'backbone.{k}': v
                                for k, v in host.state_dict().items()}),
               host_path)
    config = tmp_path / 'swin_tiny.py'
    config.write_text(SWIN.format(repo=REPO))
    init_path = str(tmp_path / 'swin_init.pth')
    out = run('tools/dgssa_init.py', str(config), '--checkpoint', host_path,
              '--out', init_path, '--num-images', '2', '--batch-size', '2',
              '--tiny', '--cfg-options', f'tiny.data_root={tiny_data_dir}')
    assert 'stages.0.blocks.1.attn.w_msa' in out  # the shifted block
    state = torch.load(init_path)['state_dict']
    names = [k for k in state if k.endswith('static_logits')]
    assert len(names) == 7
    ours = DGSSASwinTransformer(
        embed_dims=32, depths=[2, 2, 2, 1], num_heads=[1, 2, 4, 8],
        static_blocks=3, out_indices=(3, ),  # the config's host
        init_cfg=dict(type='Pretrained', checkpoint=init_path))
    ours.init_weights()
    assert not ours.load_report['missing'] and \
        not ours.load_report['unused']
    key = 'stages.0.blocks.1.attn.w_msa.static_logits'
    assert_equal(ours.state_dict()[key], state[f'backbone.{key}'])
    # the mean attention of a window contains the relative position bias
    assert ours.state_dict()[key].shape == (1, 49, 49)


def test_shifted_block_statistics_use_whole_windows():
    from mmvitaccel.models.dgssa import StaticShiftWindowMSA
    from mmvitaccel.analysis.attention_stats import interior_windows
    block = StaticShiftWindowMSA(8, 2, 7, shift_size=3)
    allowed = block.attention_mask(torch.ones(14, 21, dtype=torch.bool))
    mask = torch.zeros(allowed.shape).masked_fill(~allowed, -100.)
    attn = torch.rand(2 * 6, 2, 49, 49)  # 2 images x 6 windows
    # windows (0, 0) and (0, 1) of the 2x3 grid are whole
    assert_equal(interior_windows(attn, mask),  # a selection
                 attn.view(2, 6, 2, 49, 49)[:, :2].flatten(0, 1))
    assert interior_windows(attn, None) is attn
    # a single (cut) window: all of it
    one = block.attention_mask(torch.ones(7, 7, dtype=torch.bool))
    one = torch.zeros(one.shape).masked_fill(~one, -100.)
    assert interior_windows(attn[:2], one).shape == (2, 2, 49, 49)
