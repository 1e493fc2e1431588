"""The tools, end to end, as a user runs them (subprocesses)."""
import glob
import os
import os.path as osp
import subprocess
import sys

import pytest

from .utils import REPO

COCO = 'configs/_base_/swin_s_cascade_mask_rcnn_3x_coco.py'
# a user's own config on top of ours: a DeiT small enough for CPU epochs
TINY_DEIT = '''
_base_ = '{repo}/configs/_base_/deit_s_in1k.py'
model = dict(
    backbone=dict(arch=dict(_delete_=True, embed_dims=32, num_layers=2,
                            num_heads=2, feedforward_channels=64)),
    head=dict(in_channels=32))
'''


def run(*args, cwd=REPO):
    proc = subprocess.run([sys.executable, *args],
                          cwd=cwd,
                          capture_output=True,
                          text=True,
                          env=dict(os.environ, PYTHONWARNINGS='ignore'))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


@pytest.mark.slow
def test_train_resume_test(tmp_path, tiny_data_dir):
    config = tmp_path / 'tiny_deit.py'
    config.write_text(TINY_DEIT.format(repo=REPO))
    DEIT = str(config)
    work = str(tmp_path / 'work')
    common = ['--tiny', '--work-dir', work, '--cfg-options',
              f'tiny.data_root={tiny_data_dir}']
    # --amp is overridden by --tiny on a CPU (AMP needs a GPU)
    run('tools/train.py', DEIT, '--amp', *common, 'tiny.max_epochs=1')
    assert osp.isfile(osp.join(work, 'epoch_1.pth'))
    # resume under torch's weights_only default: needs the compat allow-list
    out = run('tools/train.py', DEIT, '--resume', *common, 'tiny.max_epochs=2')
    assert 'resumed epoch: 1' in out
    assert osp.isfile(osp.join(work, 'epoch_2.pth'))
    out = run('tools/test.py', DEIT, osp.join(work, 'epoch_2.pth'), *common,
              '--out', str(tmp_path / 'preds.pkl'))
    assert 'accuracy/top1' in out
    assert osp.isfile(tmp_path / 'preds.pkl')


@pytest.mark.slow
def test_config_runs_under_mmdet_packaged_train_tool(tmp_path, tiny_data_dir):
    import mmdet
    tool = osp.join(osp.dirname(mmdet.__file__), '.mim', 'tools', 'train.py')
    if not osp.isfile(tool):
        pytest.skip('this mmdet install does not ship its tools')
    work = str(tmp_path / 'work')
    run(tool, COCO, '--work-dir', work, '--cfg-options',
        'runner_type=mmvitaccel.TinyRunner', f'tiny.data_root={tiny_data_dir}',
        'tiny.max_epochs=1', 'tiny.rois=16',
        'train_dataloader.dataset.indices=4', 'val_dataloader.dataset.indices=2',
        'model.backbone.embed_dims=32',
        'model.backbone.depths=[1,1,2,1]', 'model.backbone.num_heads=[1,2,4,8]',
        'model.neck.in_channels=[32,64,128,256]')
    assert glob.glob(osp.join(work, 'epoch_1.pth'))


@pytest.mark.slow
def test_swin_checkpoint_converter(tmp_path):
    import torch
    from mmdet.models.backbones import SwinTransformer
    swin = SwinTransformer(embed_dims=32, depths=(1, 1, 6, 1),
                           num_heads=(1, 2, 4, 8))
    torch.save(dict(state_dict={f'backbone.{k}': v
                                for k, v in swin.state_dict().items()}),
               tmp_path / 'swin.pth')
    config = tmp_path / 'tiny_stvit.py'
    config.write_text(
        f"_base_ = '{REPO}/configs/stvit_r_swin_s_coco.py'\n"
        "model = dict(backbone=dict(arch=None, embed_dims=32, "
        "depths=[1, 1, 6, 1], num_heads=[1, 2, 4, 8]))\n")
    out = run('tools/model_converters/convert_checkpoint.py', str(config),
              str(tmp_path / 'swin.pth'), str(tmp_path / 'stvit.pth'))
    # 10 position tables of the replaced blocks, and the patch embedding
    # (projection and norm) that the authors' stem replaces
    assert 'unused: 14' in out and 'missing: 0' in out
    state = torch.load(tmp_path / 'stvit.pth')['state_dict']
    qkv = 'backbone.stages.2.blocks.1.attn.w_msa.qkv.weight'
    assert torch.equal(state[qkv], swin.state_dict()[qkv[9:]])


@pytest.mark.slow
def test_stvit_r_mixed_into_mmseg_upernet_by_cfg_options(tmp_path,
                                                          tiny_data_dir):
    """The issue's user story: mmseg's own UperNet Swin config, with only
    the backbone type (and tiny widths) changed on the command line."""
    config = ('mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_'
              '8xb2-160k_ade20k-512x512.py')
    out = run('tools/train.py', config, '--tiny', '--work-dir',
              str(tmp_path / 'work'), '--cfg-options',
              'model.backbone.type=mmvitaccel.STViTRSwinTransformer',
              'model.backbone.embed_dims=32',
              'model.backbone.depths=[1,1,6,1]',
              'model.backbone.num_heads=[1,2,4,8]',
              'model.decode_head.in_channels=[32,64,128,256]',
              'model.decode_head.channels=64',
              'model.auxiliary_head.in_channels=128',
              'model.auxiliary_head.channels=32',
              f'tiny.data_root={tiny_data_dir}', 'tiny.max_iters=2')
    assert 'STViTRSwinTransformer' in out and 'mIoU' in out
