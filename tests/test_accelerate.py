"""The switch (mmvitaccel.switch.accelerate_config, tools/accelerate.py):
every installed upstream config with a host backbone converts, builds and
runs; a method off is the upstream backbone bit for bit; the written file
is the API's config; bad requests are refused by name."""
import os
import os.path as osp
import re
import sys

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import MODELS, DefaultScope, init_default_scope
from mmengine.utils import get_installed_path

import mmvitaccel  # noqa: F401
from mmvitaccel.switch.accelerate import (METHODS, accelerate_config,
                                          accelerated_config_text,
                                          load_upstream_config)
from mmvitaccel.switch.host_classes import HOST_KINDS
from mmvitaccel.switch.hosts import find_host
from mmvitaccel.switch.placement import dgssa_static_blocks, stvit_stgm_index

from .utils import REPO

TOOLBOXES = ('mmpretrain', 'mmdet', 'mmseg', 'mmaction')
MMDET_SWIN = 'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'
MMPRETRAIN_SWIN = 'mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py'
MMSEG_SWIN = ('mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_'
              '8xb2-160k_ade20k-512x512.py')
MMACTION_SWIN = ('mmaction::recognition/swin/swin-tiny-p244-w877_in1k-pre_'
                 '8xb8-amp-32x2x1-30e_kinetics400-rgb.py')
MMPRETRAIN_DEIT = 'mmpretrain::deit/deit-small_4xb256_in1k.py'
#: a config with no default_scope (mmpretrain's API builds it)
GLIP_SWIN = 'mmpretrain::glip/glip-t_headless.py'
_BASE = re.compile(r'_base_\s*=\s*(\[[^\]]*\]|[^\n]*)', re.S)
_STRING = re.compile(r'[\'"]([^\'"]+\.py)[\'"]')


def _chain_text(path, seen=None):
    """The text of a config file and of its ``_base_`` files (relative
    ones; a ``toolbox::`` base is another package's, none of ours)."""
    seen = set() if seen is None else seen
    if path in seen or not osp.isfile(path):
        return ''
    seen.add(path)
    with open(path) as f:
        text = f.read()
    match = _BASE.search(text)
    bases = _STRING.findall(match.group(1)) if match else []
    return text + ''.join(
        _chain_text(osp.normpath(osp.join(osp.dirname(path), b)), seen)
        for b in bases if '::' not in b)


def upstream_host_configs():
    """``toolbox::path`` of every installed toolbox config (not a
    ``_base_`` fragment) whose merged ``model.backbone`` is a host of
    :data:`~mmvitaccel.switch.host_classes.HOST_KINDS`, with the host."""
    types = {t for _, t in HOST_KINDS}
    found = []
    for toolbox in TOOLBOXES:
        root = osp.join(get_installed_path(toolbox), '.mim', 'configs')
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != '_base_')
            for name in sorted(files):
                path = osp.join(folder, name)
                text = _chain_text(path) if name.endswith('.py') else ''
                if not any(f"'{t}'" in text or f'"{t}"' in text
                           for t in types):
                    continue  # cheap: no host type in the chain
                cfg = Config.fromfile(path)
                backbone = cfg.get('model', {}).get('backbone') or {}
                type_ = str(backbone.get('type'))
                scope = cfg.get('default_scope') or toolbox
                if '.' in type_:
                    scope, type_ = type_.split('.', 1)
                if (scope, type_) not in HOST_KINDS:
                    continue  # another backbone (Swin-V2, mmseg's ViT, ...)
                host = find_host(cfg, toolbox)
                # (mmpretrain's GLIP backbones set no scope: its API's)
                cfg.setdefault('default_scope', toolbox)
                found.append((f'{toolbox}::{osp.relpath(path, root)}', cfg,
                              host))
    return found


@pytest.fixture(scope='module')
def upstream():
    return upstream_host_configs()


def _backbone_without_weights(cfg):
    backbone = cfg.model.backbone.to_dict()
    backbone.pop('init_cfg', None)
    if backbone.get('pretrained') is not None:
        backbone['pretrained'] = None  # no download
        backbone['pretrained2d'] = False
    return backbone


def _input(host, backbone):
    channels = host.args.get('in_channels', 3)
    if host.kind == 'swin3d':
        return torch.rand(1, channels, 4, 64, 64)
    if host.kind == 'vit':  # its img_size (DGSSA's static maps are fixed)
        size = backbone['img_size']
        return torch.rand(1, channels, size, size)
    return torch.rand(1, channels, 64, 64)


#: backbone arguments that change training only, not an eval forward
_TRAINING_ONLY = ('drop_path_rate', 'with_cp', 'frozen_stages',
                  'convert_weights')


def _narrow(cfg, host):
    """``cfg`` with its backbone 8 channels wide per head (a ViT also at
    4 x 4 patches); depths, heads, windows and every other argument as
    configured, so the placement is the same: Swin-L, ViT-H or DINOv2-g
    configs build and run at CPU cost. PVTv2 (b0 is 32 wide) stays."""
    cfg = cfg.copy()
    backbone = cfg.model.backbone
    heads = list(host.num_heads)
    if host.kind == 'vit':
        backbone.arch = dict(embed_dims=8 * heads[0],
                             num_layers=host.depths[0], num_heads=heads[0],
                             feedforward_channels=32 * heads[0])
        stride = (backbone.get('patch_cfg') or {}).get(
            'stride', backbone.get('patch_size', 16))
        backbone.img_size = 4 * stride
    elif host.kind == 'swin3d' or host.toolbox == 'mmpretrain':
        backbone.arch = dict(embed_dims=8 * heads[0],
                             depths=list(host.depths), num_heads=heads)
    elif host.kind == 'swin':
        backbone.embed_dims = 8 * heads[0]
    return cfg


@pytest.mark.slow
def test_every_upstream_host_config_converts_builds_and_runs(upstream):
    """Each config of the installed toolboxes whose backbone a method fits
    converts with each such method; each distinct converted backbone builds
    and runs a forward on a small input. Many configs share a backbone, or
    differ only in arguments that act in training alone (stochastic depth,
    activation checkpointing, frozen stages, weight conversion on load):
    those build and run once, converted again 8 channels wide per head
    (and a ViT at 4 x 4 patches, :func:`_narrow`)."""
    counts = {t: 0 for t in TOOLBOXES}
    distinct, conversions, refused = {}, 0, []
    for name, cfg, host in upstream:
        counts[name.split('::')[0]] += 1
        for method, spec in METHODS.items():
            if host.kind not in spec.type:
                continue
            # the distilling methods need the upstream weights (not read)
            try:
                new = accelerate_config(cfg, method, checkpoint='upstream.pth')
            except ValueError as err:
                refused.append((name, method, str(err)))
                continue
            conversions += 1
            assert new.model.backbone.type == \
                f'mmvitaccel.{spec.type[host.kind]}', name
            assert 'mmvitaccel' in new.custom_imports.imports
            new = accelerate_config(_narrow(cfg, host), method,
                                    checkpoint='upstream.pth')
            backbone = _backbone_without_weights(new)
            key = repr(sorted((k, v) for k, v in backbone.items()
                              if k not in _TRAINING_ONLY))
            distinct.setdefault(key, (name, method, host, backbone))
    # every toolbox has host configs, and all of them were found
    assert all(counts.values()), counts
    assert sum(counts.values()) >= 180, counts
    print(f'\n{sum(counts.values())} upstream configs {counts}, '
          f'{conversions} conversions, {len(distinct)} distinct backbones, '
          f'{len(refused)} refused')
    # refused only where the placement cannot apply, by name: DeiT-T's 3
    # heads do not halve (hvit), a 5-stage Swin has no mmpretrain form
    # (hvit), DINOv2-g's SwiGLU FFN is no mmcv FFN (hvit), a headless feature extractor has no classifier to fine-tune
    # and distil (sait, asvit, integrated)
    reasons = ('needs an even head count', 'strides=(4, 2, 2, 2, 2)',
               "ffn_type='swiglu_fused'",
               'is not an mmpretrain ImageClassifier with a head')
    for name, method, err in refused:
        assert any(r in err for r in reasons), (name, method, err)
    assert len(refused) <= 20, refused
    for name, method, host, backbone in distinct.values():
        scope = host.toolbox
        init_default_scope(scope)
        with DefaultScope.overwrite_default_scope(scope):
            model = MODELS.build(backbone)  # as constructed: no download
        model.eval()  # (mmdet's Swin.train returns None)
        with torch.no_grad():
            out = model(_input(host, backbone))
        outs = out if isinstance(out, (tuple, list)) else [out]
        outs = [o for o in outs for o in (o if isinstance(o, (tuple, list))
                                          else [o])]
        assert all(torch.isfinite(o).all() for o in outs), (name, method)


def _unscoped(node):
    if hasattr(node, 'to_dict'):
        node = node.to_dict()
    if isinstance(node, dict):
        return {k: _unscoped(v) for k, v in node.items() if k != '_scope_'}
    if isinstance(node, (list, tuple)):
        return type(node)(_unscoped(v) for v in node)
    return node


def _upstream_and_ours(config, method, **options):
    upstream_cfg = load_upstream_config(config)
    ours_cfg = accelerate_config(upstream_cfg, method, **options)
    scope = upstream_cfg.default_scope
    init_default_scope(scope)
    with DefaultScope.overwrite_default_scope(scope):
        torch.manual_seed(0)
        host = MODELS.build(_backbone_without_weights(upstream_cfg))
        ours = MODELS.build(_backbone_without_weights(ours_cfg))
    host.eval()  # mmdet's Swin.train returns None
    ours.eval()
    return host, ours


@pytest.mark.parametrize('config', [MMDET_SWIN, MMPRETRAIN_SWIN, MMSEG_SWIN])
@pytest.mark.parametrize('method,options', [('stvit-r', dict(num_units=0)),
                                            ('tome', dict(r=0))])
def test_a_method_off_is_the_upstream_backbone_bit_for_bit(config, method,
                                                           options):
    """STViT-R with no dumbbell unit and ToMe merging nothing are the host
    Swin: with the upstream backbone's weights, the converted backbone
    (every argument carried over, mmpretrain's translated to mmdet's Swin)
    computes the same maps, exactly (the same operations in the same
    order). 256 px: no map is smaller than a window, where mmpretrain's
    Swin pads differently."""
    host, ours = _upstream_and_ours(config, method, **options)
    missing, unexpected = ours.load_state_dict(host.state_dict(),
                                               strict=False)
    assert not unexpected, unexpected
    assert all('relative_position_index' in k for k in missing), missing
    x = torch.rand(1, 3, 256, 256)
    with torch.no_grad():
        expected, got = host(x), ours(x)
    assert len(got) == len(expected)
    for e, g in zip(expected, got):
        assert torch.equal(e, g)


@pytest.mark.parametrize('config,method', [(MMDET_SWIN, 'stvit-r'),
                                           (MMPRETRAIN_SWIN, 'stvit'),
                                           (MMSEG_SWIN, 'dgssa'),
                                           (MMACTION_SWIN, 'stvit'),
                                           (GLIP_SWIN, 'stvit-r'),
                                           (MMPRETRAIN_DEIT, 'tis'),
                                           (MMDET_SWIN, 'hvit')])
def test_the_written_file_loads_to_the_api_config(tmp_path, config, method):
    """``tools/accelerate.py`` writes a config inheriting CONFIG whose merged
    form is :func:`accelerate_config`'s."""
    sys.path.insert(0, osp.join(REPO, 'tools'))
    import accelerate
    out = str(tmp_path / 'sub' / 'new.py')
    accelerate.main([config, '--method', method, '--out', out])
    written = Config.fromfile(out)
    expected = accelerate_config(config, method)
    # mmengine marks what a toolbox:: base defines with its scope
    toolbox = config.split('::')[0]
    assert written.model._scope_ == toolbox
    assert written.default_scope == expected.default_scope == toolbox
    for key in ('model', 'optim_wrapper', 'custom_imports'):
        assert _unscoped(written.get(key)) == _unscoped(expected.get(key)), key
    with open(out) as f:
        assert f"_base_ = '{config}'" in f.read()


def test_a_file_config_is_inherited_by_a_relative_path(tmp_path):
    upstream = osp.join(REPO, 'configs', '_base_', 'swin_s_in1k.py')
    out = tmp_path / 'new.py'
    text = accelerated_config_text(upstream, str(out), 'stvit-r')
    assert f"_base_ = '{osp.relpath(upstream, tmp_path)}'" in text
    out.write_text(text)
    assert Config.fromfile(str(out)).model.backbone.type == \
        'mmvitaccel.STViTRSwinTransformer'


def test_carried_arguments_and_paper_placement():
    cfg = load_upstream_config(MMDET_SWIN)
    upstream = cfg.model.backbone.to_dict()
    new = accelerate_config(cfg, 'stvit-r').model.backbone.to_dict()
    for key, value in upstream.items():
        if key != 'type':
            assert list(new[key]) == list(value) if isinstance(
                value, (list, tuple)) else new[key] == value, key
    assert new['key_windows'] == (14, 21) and new['recovery_window'] == 27
    assert cfg.model.backbone.type == 'SwinTransformer'  # not changed
    # the classification setting on mmpretrain, its out_indices kept
    new = accelerate_config(MMPRETRAIN_SWIN, 'stvit-r').model.backbone
    assert new.key_windows == (10, 14) and new.key_region == 'inside'
    assert tuple(new.out_indices) == (3, ) and new.depths == (2, 2, 6, 2)
    assert new.drop_path_rate == 0.2
    # the paper's placements on its sizes, and the rules between them
    assert [stvit_stgm_index(d) for d in (6, 12, 18)] == [2, 6, 10]
    assert [dgssa_static_blocks(d) for d in ((2, 2, 6, 2), (2, 2, 18, 2))
            ] == [6, 12]
    assert [stvit_stgm_index(d, move_stgm=True) for d in (6, 18)] == [1, 8]
    new = accelerate_config(MMPRETRAIN_SWIN, 'stvit', move_stgm=True)
    assert new.model.backbone.stgm_index == 1 and new.model.neck is None


def test_a_larger_window_scales_the_key_windows():
    cfg = load_upstream_config(MMDET_SWIN)
    cfg.model.backbone.window_size = 12
    new = accelerate_config(cfg, 'stvit-r').model.backbone
    assert new.key_windows == (24, 36) and new.recovery_window == 46


@pytest.mark.parametrize('config,method,match', [
    ('mmpretrain::resnet/resnet50_8xb32_in1k.py', 'stvit-r',
     r"no method here fits the backbone 'ResNet'"),
    (MMACTION_SWIN, 'dgssa', r'dgssa does not fit the mmaction '
     r'SwinTransformer3D.*it fits: swin hosts'),
    (MMDET_SWIN, 'evit', r"unknown method 'evit'; choose from"),
    (MMDET_SWIN, 'tis', r'tis does not fit the mmdet SwinTransformer.*'
     r'it fits: vit hosts'),
    (MMACTION_SWIN, 'tome', r'tome does not fit the mmaction '
     r'SwinTransformer3D.*it fits: '),
    ('configs/stvit_r_swin_s_coco.py', 'stvit-r',
     r'already mmvitaccel.STViTRSwinTransformer'),
    ('no/such/config.py', 'stvit-r', r"no config file 'no/such/config.py'"),
])
def test_bad_requests_are_refused_by_name(config, method, match):
    if config.startswith('configs/'):
        config = osp.join(REPO, config)
    with pytest.raises((ValueError, FileNotFoundError), match=match):
        accelerate_config(config, method)


def test_a_host_too_shallow_for_the_placement_is_refused():
    cfg = load_upstream_config(MMDET_SWIN)
    cfg.model.backbone.depths = [2, 2, 4, 2]
    with pytest.raises(ValueError, match='stage 3 has 4 blocks'):
        accelerate_config(cfg, 'stvit-r')
    # fewer units by option: 0 is the plain Swin
    assert accelerate_config(cfg, 'stvit-r',
                             num_units=0).model.backbone.num_units == 0
    cfg.model.backbone.depths = [2, 2, 2, 2]
    with pytest.raises(ValueError, match='stage 3 has 2 blocks'):
        accelerate_config(cfg, 'stvit')


def test_an_mmpretrain_argument_without_counterpart_is_refused():
    cfg = load_upstream_config(MMPRETRAIN_SWIN)
    cfg.model.backbone.out_after_downsample = True
    with pytest.raises(ValueError, match='out_after_downsample=True has no '
                       'counterpart'):
        accelerate_config(cfg, 'stvit-r')


@pytest.mark.parametrize('config,method,options', [
    (MMPRETRAIN_SWIN, 'stvit-r', {}),
    (MMDET_SWIN, 'stvit-r', {}),
    (MMSEG_SWIN, 'dgssa', dict(static_init='uniform')),
    (MMACTION_SWIN, 'stvit', {}),
])
def test_an_upstream_checkpoint_loads_with_a_full_report(
        tmp_path, config, method, options):
    """A whole-model checkpoint in the toolbox's own layout (the upstream
    model's state dict) loads into the converted config's backbone through
    the checkpoint it points at: every host tensor the method keeps is
    loaded with its value, none is missing or mismatched, and the unused
    ones are exactly those the method replaces."""
    upstream_cfg = load_upstream_config(config)
    scope = upstream_cfg.default_scope
    init_default_scope(scope)
    model_cfg = upstream_cfg.model.copy()
    model_cfg.backbone = _backbone_without_weights(upstream_cfg)
    model_cfg.pop('pretrained', None)
    with DefaultScope.overwrite_default_scope(scope):
        torch.manual_seed(0)
        upstream_model = MODELS.build(model_cfg)
    state = upstream_model.state_dict()
    path = str(tmp_path / 'upstream.pth')
    torch.save(dict(state_dict=state, meta=dict(toolbox=scope)), path)

    cfg = accelerate_config(upstream_cfg, method, **options)
    backbone = _backbone_without_weights(cfg)
    if method == 'stvit' and scope == 'mmaction':
        backbone.update(pretrained=path, pretrained2d=False)
    else:
        backbone['init_cfg'] = dict(type='Pretrained', checkpoint=path)
    with DefaultScope.overwrite_default_scope(scope):
        ours = MODELS.build(backbone)
    ours.init_weights()
    report = ours.load_report
    assert not report['missing'] and not report['mismatched'], report
    host_keys = [k[len('backbone.'):] for k in state
                 if k.startswith('backbone.')
                 and not k.endswith('relative_position_index')]
    own = ours.state_dict()
    converted = [k for k in report['loaded'] if 'backbone.' + k not in state]
    for key in report['loaded']:
        if key not in converted:
            assert torch.equal(own[key], state['backbone.' + key]), key
    dropped = set(host_keys) - set(report['loaded'])
    # what each method replaces: the position tables of the blocks that
    # attend among semantic tokens (STViT-R's units but their image block,
    # STViT's blocks after the STGM), the patch merging after STViT's
    # semantic stage; DGSSA's Q/K and position tables of its static blocks
    # (their V is what loads, converted from qkv)
    replaced = dict(
        stvit_r=lambda k: k.startswith('stages.2.blocks.') and k.endswith(
            'relative_position_bias_table') and not k.startswith(
                'stages.2.blocks.0.'),
        dgssa=lambda k: k.endswith(('.qkv.weight', '.qkv.bias',
                                    'relative_position_bias_table')),
        stvit=lambda k: k.endswith('relative_position_bias_table') or
        k.startswith('layers.2.downsample'))[method.replace('-', '_')]
    assert all(replaced(k) for k in dropped), sorted(dropped)
    assert all(k.endswith(('.v.weight', '.v.bias')) for k in converted)
    assert len(report['loaded']) > 0.8 * len(host_keys)


#: per toolbox: a converted config, and what makes it small enough for a
#: CPU step (the backbone sizes as method options, the heads' inputs)
_TINY_SWIN = dict(embed_dims=32, depths=(1, 1, 6, 1), num_heads=(1, 2, 4, 8))
_TRAINED = [
    (MMPRETRAIN_SWIN, 'stvit-r', _TINY_SWIN,
     {'model.head.in_channels': 256}),
    (MMDET_SWIN, 'stvit-r', _TINY_SWIN,
     {'model.neck.in_channels': [32, 64, 128, 256]}),
    (MMSEG_SWIN, 'dgssa', dict(_TINY_SWIN, static_init='uniform'),
     {'model.decode_head.in_channels': [32, 64, 128, 256],
      'model.decode_head.channels': 64,
      'model.auxiliary_head.in_channels': 128,
      'model.auxiliary_head.channels': 32}),
    (MMACTION_SWIN, 'stvit',
     dict(arch=dict(embed_dims=32, depths=[1, 1, 4, 1],
                    num_heads=[1, 2, 4, 8])),
     {'model.cls_head.in_channels': 256}),
    (MMDET_SWIN, 'tome', _TINY_SWIN,
     {'model.neck.in_channels': [32, 64, 128, 256]}),
    (MMSEG_SWIN, 'tome', _TINY_SWIN,
     {'model.decode_head.in_channels': [32, 64, 128, 256],
      'model.decode_head.channels': 64,
      'model.auxiliary_head.in_channels': 128,
      'model.auxiliary_head.channels': 32}),
]


@pytest.mark.parametrize('config,method,options,heads', _TRAINED,
                         ids=[t[0].split('::')[0] + ('-tome' if t[1] == 'tome'
                                                     else '')
                              for t in _TRAINED])
def test_a_written_config_trains_a_step_and_predicts(
        config, method, options, heads, tmp_path, tiny_data_dir):
    """The file tools/accelerate.py writes, inheriting the upstream config,
    trains one step through the runner's pieces and predicts, on tiny
    data (the upstream recipe's pipeline, optimizer and heads)."""
    from mmvitaccel.tiny import tinyfy_config

    from .utils import assert_updated, train_and_predict_one_batch
    out = tmp_path / 'accelerated.py'
    out.write_text(accelerated_config_text(config, str(out), method,
                                           **options))
    cfg = Config.fromfile(str(out))
    assert cfg.model.backbone.type.startswith('mmvitaccel.')
    cfg.merge_from_dict(heads)
    cfg.work_dir = str(tmp_path / 'work')
    cfg = tinyfy_config(cfg, data_root=str(tiny_data_dir))
    cfg.randomness = dict(seed=0)
    updates = {}
    losses, preds, _ = train_and_predict_one_batch(cfg, updates)
    assert losses and all(torch.isfinite(v).all() for v in losses.values()
                          if isinstance(v, torch.Tensor))
    assert_updated(updates)
    assert len(preds) == cfg.test_dataloader.batch_size

