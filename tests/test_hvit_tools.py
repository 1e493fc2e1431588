"""tools/reparameterize.py: a trained hMHSA/cFFN checkpoint -> deploy form
with identical outputs; the converter tool reads hosts for HViT backbones."""
import importlib.util
import os.path as osp
import subprocess
import sys

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import MODELS, DefaultScope, init_default_scope
from mmengine.runner.checkpoint import load_checkpoint

import mmvitaccel  # noqa: F401
from mmvitaccel.ops import RepLinear

from .test_hvit import HOST_TERMS
from .tolerance import assert_equal, rounding_tol
from .utils import REPO, TINY_MODELS


def _tool(name, path):
    spec = importlib.util.spec_from_file_location(name, osp.join(REPO, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _config(tmp_path, config, **extra):
    """A user config: ``config`` with the tiny model of the recipe tests."""
    cfg = Config.fromfile(osp.join(REPO, config))
    cfg.merge_from_dict({
        k: v
        for k, v in TINY_MODELS[config].items() if not k.startswith('tiny.')
    })
    cfg.merge_from_dict(extra)
    path = str(tmp_path / osp.basename(config))
    cfg.dump(path)
    return path


def _build(path, **options):
    cfg = Config.fromfile(path)
    cfg.merge_from_dict(options)
    init_default_scope('mmpretrain')
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(cfg.model)


@pytest.mark.parametrize('config', [
    'configs/hvit_pvtv2_b1_tinyimagenet.py', 'configs/hvit_deit_s_in1k.py',
    'configs/hvit_swin_t_in1k.py'
])
def test_reparameterize_tool_gives_identical_outputs(config, tmp_path):
    path = _config(tmp_path, config)
    torch.manual_seed(0)
    model = _build(path)
    model.init_weights()
    x = torch.randn(2, 3, 224, 224)
    model.train()  # as after training: BN statistics away from (0, 1)
    with torch.no_grad():
        for _ in range(2):
            model.extract_feat(x + torch.randn_like(x))
        for p in model.head.parameters():  # DeiT's head starts at zero
            p.add_(0.02 * torch.randn_like(p))
    trained = str(tmp_path / 'epoch_1.pth')
    torch.save(dict(state_dict=model.state_dict(), meta=dict(epoch=1)),
               trained)
    deploy = str(tmp_path / 'deploy.pth')
    diff = _tool('reparameterize', 'tools/reparameterize.py').main(
        [path, trained, deploy, '--check-shape', '1', '3', '224', '224'])
    # the tool's float32 check: rounding through a tiny host at 224 (n <
    # HOST_TERMS, 49-token windows included) of backbone outputs after a
    # LayerNorm (|y| < 5 here); the float64 check below is the tight one
    assert diff < rounding_tol(torch.float32, HOST_TERMS, 5.)

    folded = _build(path, **{'model.backbone.deploy': True})
    load_checkpoint(folded, deploy, map_location='cpu', strict=True)
    assert not any(isinstance(m, RepLinear) and not m.deploy
                   for m in folded.modules())
    model.eval()
    folded.eval()
    with torch.no_grad():
        ref = model(x, mode='tensor')
        out = folded(x, mode='tensor')
        assert ref.argmax(-1).tolist() == out.argmax(-1).tolist()
        # in float64 only the tool's float32 folding differs: <= 4
        # roundings of each folded weight (BN scale, product, branch sum),
        # in U and V of <= 5 cFFN layers: n = 40 relative to the logits
        # (the float64 rounding, 2 n u with n < HOST_TERMS, is far below)
        ref = model.double()(x.double(), mode='tensor')
        out = folded.double()(x.double(), mode='tensor')
    scale = float(ref.abs().max())
    assert float((out - ref).abs().max()) <= \
        rounding_tol(torch.float32, 40, scale) + \
        rounding_tol(torch.float64, HOST_TERMS, scale)
    assert torch.load(deploy, weights_only=False)['meta']['deploy'] is True


def test_reparameterize_refuses_a_deploy_config(tmp_path):
    path = _config(tmp_path, 'configs/hvit_deit_s_in1k.py',
                   **{'model.backbone.deploy': True})
    with pytest.raises(ValueError, match='training form'):
        _tool('reparameterize', 'tools/reparameterize.py').main(
            [path, 'unused.pth', str(tmp_path / 'out.pth')])


@pytest.mark.slow
def test_checkpoint_converter_reads_a_host_for_hvit(tmp_path):
    from mmpretrain.models import VisionTransformer
    path = _config(tmp_path, 'configs/hvit_deit_s_in1k.py')
    arch = dict(TINY_MODELS['configs/hvit_deit_s_in1k.py']
                ['model.backbone.arch'])
    arch.pop('_delete_')
    vit = VisionTransformer(arch=arch)
    src = str(tmp_path / 'deit.pth')
    torch.save(dict(state_dict={f'backbone.{k}': v
                                for k, v in vit.state_dict().items()}), src)
    out = subprocess.run(
        [sys.executable, 'tools/model_converters/convert_checkpoint.py',
         path, src, str(tmp_path / 'hvit.pth')],
        cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    # 2 layers: qkv split (nothing missing), the two M2 (weight, bias) unused
    assert 'missing: 0' in out.stdout and 'unused: 4' in out.stdout
    state = torch.load(tmp_path / 'hvit.pth')['state_dict']
    qkv = vit.state_dict()['layers.1.attn.qkv.weight']
    assert_equal(state['backbone.layers.1.attn.v.weight'], qkv[2 * 64:])


def test_folder_to_lists(tmp_path):
    tool = _tool('folder_to_lists', 'tools/data/folder_to_lists.py')
    root = tmp_path / 'dogs'
    for split, n in (('train', 2), ('val', 1)):
        for cls in ('n02-b', 'n01-a'):
            (root / split / cls).mkdir(parents=True)
            for i in range(n):
                (root / split / cls / f'{i}.jpg').write_bytes(b'')
    (root / 'train' / 'n01-a' / 'notes.txt').write_text('not an image')
    tool.main([str(root), 'train', 'val'])
    assert (root / 'meta' / 'classes.txt').read_text().split() == [
        'n01-a', 'n02-b'
    ]
    assert (root / 'meta' / 'val.txt').read_text().splitlines() == [
        'n01-a/0.jpg 0', 'n02-b/0.jpg 1'
    ]
    assert len((root / 'meta' / 'train.txt').read_text().splitlines()) == 4
    # the official Tiny-ImageNet layout: class folders with images/, flat val
    tin = tmp_path / 'tiny-imagenet-200'
    (tin / 'wnids.txt').parent.mkdir()
    (tin / 'wnids.txt').write_text('n2\nn1\n')
    for wnid in ('n1', 'n2'):
        (tin / 'train' / wnid / 'images').mkdir(parents=True)
        (tin / 'train' / wnid / 'images' / f'{wnid}_0.JPEG').write_bytes(b'')
    (tin / 'val' / 'images').mkdir(parents=True)
    (tin / 'val' / 'val_annotations.txt').write_text(
        'val_0.JPEG\tn2\t0\t0\t1\t1\nval_1.JPEG\tn1\t0\t0\t1\t1\n')
    tool.main([str(tin), 'train', 'val', '--tinyimagenet'])
    assert (tin / 'meta' / 'train.txt').read_text().splitlines() == [
        'n1/images/n1_0.JPEG 0', 'n2/images/n2_0.JPEG 1'
    ]
    assert (tin / 'meta' / 'val.txt').read_text().splitlines() == [
        'images/val_0.JPEG 1', 'images/val_1.JPEG 0'
    ]


def test_generated_tinyimagenet_fits_the_pvtv2_config(tmp_path):
    """The generator's Tiny-ImageNet shape (200 classes, 64x64) in the
    layout hvit_pvtv2_b1_tinyimagenet.py documents and reads."""
    from mmpretrain.registry import DATASETS

    from mmvitaccel.tiny.data import make_tiny_imagenet
    root = make_tiny_imagenet(str(tmp_path / 'tin'), num_classes=200,
                              num_train_per_class=1, num_val_per_class=1,
                              img_size=64)
    cfg = Config.fromfile(
        osp.join(REPO, 'configs/hvit_pvtv2_b1_tinyimagenet.py'))
    assert cfg.model.head.num_classes == 200
    for split in ('train_dataloader', 'val_dataloader'):
        ds_cfg = cfg[split].dataset
        ds_cfg.data_root = root
        ds_cfg.pipeline = [dict(type='LoadImageFromFile')]
        dataset = DATASETS.build(ds_cfg)
        labels = sorted(dataset.get_data_info(i)['gt_label']
                        for i in range(len(dataset)))
        assert labels == list(range(200))
        assert dataset[0]['img'].shape == (64, 64, 3)


def test_pvtv2_host_in_mmdet_retinanet_config(tmp_path, tiny_data_dir):
    """The PVTv2 host replaces mmdet's PVTv2-b1 in mmdet's own RetinaNet
    config by a type change; one train step and a prediction on tiny data."""
    from .utils import tiny_config, train_and_predict_one_batch
    config = tmp_path / 'retinanet_hvit_pvtv2_b1.py'
    config.write_text(
        "_base_ = 'mmdet::pvt/retinanet_pvtv2-b1_fpn_1x_coco.py'\n"
        "custom_imports = dict(imports=['mmvitaccel'], "
        "allow_failed_imports=False)\n"
        "model = dict(\n"
        "    backbone=dict(type='mmvitaccel.HViTPyramidVisionTransformerV2',\n"
        "                  embed_dims=16, num_layers=[1, 1, 1, 1]),\n"
        "    neck=dict(in_channels=[16, 32, 80, 128]),\n"
        "    test_cfg=dict(score_thr=0.0))\n")
    cfg = tiny_config(str(config), tmp_path / 'work', tiny_data_dir)
    losses, preds, metrics = train_and_predict_one_batch(cfg)
    assert all(torch.isfinite(torch.as_tensor(float(v)))
               for v in losses.values())
    assert 'coco/bbox_mAP' in metrics


def test_pvtv2_host_in_mmseg_upernet(tmp_path, tiny_data_dir):
    """The PVTv2 host as an mmseg backbone: mixed into our Swin UperNet
    recipe by a backbone swap; one train step and a prediction on tiny
    ADE20K."""
    from .utils import tiny_config, train_and_predict_one_batch
    config = tmp_path / 'upernet_hvit_pvtv2.py'
    config.write_text(
        f"_base_ = '{REPO}/configs/_base_/swin_s_upernet_ade20k.py'\n"
        "model = dict(\n"
        "    backbone=dict(_delete_=True,\n"
        "                  type='mmvitaccel.HViTPyramidVisionTransformerV2',\n"
        "                  embed_dims=16, num_layers=[1, 1, 1, 1]),\n"
        "    decode_head=dict(in_channels=[16, 32, 80, 128], channels=32),\n"
        "    auxiliary_head=dict(in_channels=80, channels=16))\n")
    cfg = tiny_config(str(config), tmp_path / 'work', tiny_data_dir)
    losses, preds, metrics = train_and_predict_one_batch(cfg)
    assert all(torch.isfinite(torch.as_tensor(float(v)))
               for v in losses.values())
    assert 'mIoU' in metrics


@pytest.mark.parametrize('grad', [False, True])
def test_forms_benchmark_times_every_shape_in_both_paths(grad, capsys,
                                                         monkeypatch):
    """tools/analysis/benchmark_hmhsa_forms.py: a row per layer shape with
    three positive times and the form 'auto' picks, in inference and with
    gradients on (--grad)."""
    tool = _tool('benchmark_hmhsa_forms',
                 'tools/analysis/benchmark_hmhsa_forms.py')
    argv = ['x', '--batch', '1', '--rounds', '1', '--iters', '1']
    monkeypatch.setattr(sys, 'argv', argv + (['--grad'] if grad else []))
    tool.main()
    out = capsys.readouterr().out
    assert ('gradients on' if grad else 'inference') in out.splitlines()[0]
    rows = [line.strip('| ').split(' | ') for line in out.splitlines()
            if line.startswith('| ') and not line.startswith(('| layer',
                                                              '| ---'))]
    assert [r[0] for r in rows] == [s[0] for s in tool.SHAPES]
    for row, shape in zip(rows, tool.SHAPES):
        assert all(float(t) > 0 for t in row[6:9])
        masked, maps = shape[-1], shape[5] // 2
        assert row[9] == ('explicit' if masked else
                          'stacked' if maps == 1 else 'fused')
