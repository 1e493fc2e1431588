"""The switch on ViT/DeiT, PVTv2 and (for HViT) Swin hosts: the papers'
placements scaled to the host, a method off is the upstream backbone, the
training-free conversions run on the upstream weights through
``tools/test.py`` with every host tensor used, an upstream checkpoint
loaded by the runner is read through our backbones' readers with a full
report, a distilling conversion trains a step (the dense study's method
rows are the switch's conversions: tests/test_dense_study.py)."""
import os.path as osp
from types import SimpleNamespace

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import MODELS, DefaultScope, init_default_scope

import mmvitaccel  # noqa: F401
from mmvitaccel.switch.accelerate import (accelerate_config,
                                          accelerated_config_text,
                                          load_upstream_config)
from mmvitaccel.switch.vit_placement import (glad_tokens, scaled_layers,
                                            tome_r)
from mmvitaccel.engine.checkpoint_check_hook import CheckpointCheckHook

from .utils import (REPO, assert_tools_test_loads_everything,
                    user_checkpoint)

DEIT = 'mmpretrain::deit/deit-small_4xb256_in1k.py'
MMDET_SWIN = 'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'
MMSEG_SWIN = ('mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_'
              '8xb2-160k_ade20k-512x512.py')
PVTV2 = 'mmdet::pvt/retinanet_pvtv2-b0_fpn_1x_coco.py'
#: a user's DeiT config, small enough for CPU steps (4 layers, 2 heads)
TINY_DEIT = '''
_base_ = '{base}'
model = dict(
    backbone=dict(arch=dict(_delete_=True, embed_dims=32, num_layers=4,
                            num_heads=2, feedforward_channels=64)),
    head=dict(in_channels=32))
'''


def _build(model_cfg, scope):
    init_default_scope(scope)
    with DefaultScope.overwrite_default_scope(scope):
        torch.manual_seed(0)
        return MODELS.build(model_cfg)


@pytest.fixture
def tiny_deit(tmp_path):
    """A small DeiT config inheriting mmpretrain's, and a checkpoint of its
    whole classifier in mmpretrain's layout."""
    return user_checkpoint(tmp_path, 'deit', TINY_DEIT.format(base=DEIT),
                           'mmpretrain')


def test_the_papers_placements_scale_with_the_host():
    # the papers' own 12-layer DeiTs with 196 patches: unchanged
    assert scaled_layers((3, ), 12) == (3, )
    assert scaled_layers((4, 7, 10), 12) == (4, 7, 10)
    assert glad_tokens(196) == (127, 77, 35)
    assert glad_tokens(196, tiny=True) == (157, 107, 57)
    # the digits study's 64-patch host got the same counts by hand
    assert glad_tokens(64) == (42, 25, 12)
    tiny = accelerate_config('mmpretrain::deit/deit-tiny_4xb256_in1k.py',
                             'integrated', checkpoint='deit.pth')
    assert tiny.model.backbone.glad_tokens == (157, 107, 57)
    # ViT-L (24 layers), mmpretrain's 8-layer ViT-S
    assert scaled_layers((4, 7, 10), 24) == (8, 14, 20)
    assert scaled_layers((4, 7, 10), 8) == (3, 5, 7)
    assert scaled_layers((1, 2), 4) == (1, 2)  # a collision moves on
    with pytest.raises(ValueError, match='do not fit a host of 3 layers'):
        scaled_layers((4, 7, 10), 3)
    # AS-ViT's thresholds are one patch's score: they scale with 196 / N
    cfg = load_upstream_config(DEIT)
    cfg.model.backbone.img_size = 128  # 64 patches of 16 px
    new = accelerate_config(cfg, 'asvit', checkpoint='deit.pth')
    assert new.model.backbone.thresholds == pytest.approx(
        (0.0030625, 0.006125, 0.0091875))
    assert new.model.backbone.tau == pytest.approx(3.0625e-4)
    new = accelerate_config(cfg, 'integrated', checkpoint='deit.pth')
    assert new.model.backbone.glad_tokens == (42, 25, 12)
    assert new.model.backbone.static_layers == (1, 2)
    assert new.model.backbone.glad_layers == (3, 5, 7)


def test_tome_merges_the_papers_share_on_any_host():
    assert tome_r(196, 12) == 13  # the paper's DeiT-S
    assert tome_r(64, 12) == 4 and tome_r(196, 24) == 6 and tome_r(4, 12) == 1
    new = accelerate_config(DEIT, 'tome')
    assert new.model.backbone.type == 'mmvitaccel.ToMeVisionTransformer'
    assert new.model.backbone.r == 13 and new.model.backbone.prop_attn
    assert new.model.type == 'ImageClassifier'  # training-free: as it was
    new = accelerate_config(DEIT, 'tome', r=(8, 0.5))
    assert new.model.backbone.r == (8, 0.5)
    new = accelerate_config(DEIT, 'tome', flops_ratio=0.6)
    assert new.model.backbone.r is None
    assert new.model.backbone.flops_ratio == 0.6
    with pytest.raises(ValueError, match='flops_ratio must be in'):
        accelerate_config(DEIT, 'tome', flops_ratio=1.5)


def test_what_each_vit_method_adds_beside_the_backbone():
    new = accelerate_config(DEIT, 'sait', checkpoint='deit.pth')
    assert new.model.type == 'mmvitaccel.TokenPrunedClassifier'
    assert new.model.teacher == dict(config=DEIT, checkpoint='deit.pth')
    assert new.model.tis_distill_weight == 4. and new.load_from == 'deit.pth'
    assert [h.type for h in new.custom_hooks][-2:] == [
        'mmvitaccel.DenseSparseAlternateHook',
        'mmvitaccel.CheckpointCheckHook']
    assert new.model.backbone.arch == 'deit-small'  # carried as it was
    new = accelerate_config(DEIT, 'integrated', checkpoint='deit.pth')
    assert new.model.teacher.type == 'mmpretrain.VisionTransformer'
    assert new.model.teacher_head.init_cfg == dict(
        type='Pretrained', checkpoint='deit.pth', prefix='head.')
    new = accelerate_config(DEIT, 'tis')
    assert new.model.type == 'ImageClassifier'  # training-free: as it was
    assert new.get('load_from') is None
    # mmpretrain's 'small' is its ViT-S; ours read it as DeiT-S: given as
    # mmpretrain's sizes
    cfg = load_upstream_config(DEIT)
    cfg.model.backbone.arch = 'small'
    assert accelerate_config(cfg, 'tis').model.backbone.arch == dict(
        embed_dims=768, num_layers=8, num_heads=8, feedforward_channels=2304)
    # PVTv2's untyped checkpoint init_cfg is typed for our reader
    new = accelerate_config(PVTV2, 'hvit').model.backbone
    assert new.init_cfg.type == 'Pretrained' and new.embed_dims == 32


@pytest.mark.parametrize('config,method,match', [
    (DEIT, 'sait', r'sait fine-tunes from the upstream weights.*give '
     r'checkpoint='),
    ('mmpretrain::deit/deit-tiny_4xb256_in1k.py', 'hvit',
     r'needs an even head count; this ViT has 3 heads'),
    ('mmpretrain::deit/deit-small-distilled_4xb256_in1k.py', 'tis',
     r'distilled DeiT carries a distillation token'),
    (DEIT, 'stvit-r', r'stvit-r does not fit the mmpretrain '
     r'VisionTransformer.*swin: mmpretrain/mmdet/mmseg SwinTransformer'),
    (PVTV2, 'tis', r'tis does not fit the mmdet PyramidVisionTransformerV2'),
])
def test_bad_vit_requests_are_refused_by_name(config, method, match):
    with pytest.raises(ValueError, match=match):
        accelerate_config(config, method)


def test_a_headless_vit_runs_training_free_only():
    headless = 'mmpretrain::dinov2/vit-small-p14_dinov2-pre_headless.py'
    assert accelerate_config(headless, 'tis').model.head is None
    for method in ('sait', 'asvit', 'integrated'):
        with pytest.raises(ValueError, match=f'{method} fine-tunes a '
                           'classifier.*not an mmpretrain ImageClassifier '
                           'with a head'):
            accelerate_config(headless, method, checkpoint='dino.pth')


def _without_weights(cfg):
    backbone = cfg.model.backbone.to_dict()
    backbone.pop('init_cfg', None)
    if backbone.get('pretrained') is not None:
        backbone.update(pretrained=None, pretrained2d=False)  # no download
    return backbone


def _backbones(config, method, **options):
    cfg = load_upstream_config(config)
    new = accelerate_config(cfg, method, **options)
    built = []
    for c in (cfg, new):
        built.append(_build(_without_weights(c), cfg.default_scope))
        built[-1].eval()  # (some backbones' train() returns None)
    return built


@pytest.mark.parametrize('config,method,options', [
    (DEIT, 'tis', dict(prune=False)),
    (DEIT, 'cls', dict(density=1.0)),
    (DEIT, 'tome', dict(r=0)),
    (PVTV2, 'hvit', dict(hmhsa=False, cffn=False)),
])
def test_a_method_off_is_the_upstream_backbone_bit_for_bit(
        config, method, options):
    """Pruning nothing (or keeping every token) and HViT with neither hMHSA
    nor cFFN compute the upstream backbone's outputs exactly, from its
    weights: the same operations in the same order."""
    host, ours = _backbones(config, method, **options)
    missing, unexpected = ours.load_state_dict(host.state_dict(),
                                               strict=False)
    assert not missing and not unexpected
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        expected, got = host(x), ours(x)
    for e, g in zip(expected, got):
        for a, b in zip(*(t if isinstance(t, (tuple, list)) else [t]
                          for t in (e, g))):
            assert torch.equal(a, b)


def test_hvit_off_on_an_mmdet_swin_is_the_upstream_swin():
    """mmdet's Swin translated to mmpretrain's (what HViT subclasses), with
    neither hMHSA nor cFFN, computes the mmdet Swin's maps bit for bit from
    its weights (read by our Swin reader), at odd sizes and where the last
    stage's map is no larger than a window (mmdet pads and shifts it:
    pad_small_map)."""
    cfg = load_upstream_config(MMDET_SWIN)
    host, ours = _backbones(cfg, 'hvit', hmhsa=False, cffn=False)
    ours.init_cfg = dict(type='Pretrained',
                         checkpoint=dict(state_dict=host.state_dict()))
    ours.init_weights()
    assert not ours.load_report['missing'] and \
        not ours.load_report['unused'], ours.load_report
    for size in (224, 97):
        x = torch.rand(1, 3, size, size)
        with torch.no_grad():
            expected, got = host(x), ours(x)
        assert len(expected) == len(got) == 4
        for e, g in zip(expected, got):
            assert torch.equal(g, e)


@pytest.mark.parametrize('method', ['tis', 'tome'])
def test_tools_test_runs_a_training_free_conversion_on_upstream_weights(
        tmp_path, tiny_deit, tiny_data_dir, method):
    """``tools/accelerate.py CONFIG --method tis`` (``tome``), then ``tools/test.py
    NEW_CONFIG UPSTREAM_CKPT``: the runner loads the upstream classifier's
    checkpoint and its report shows every tensor loaded, nothing new,
    missing or unused."""
    config, checkpoint, state = tiny_deit
    assert_tools_test_loads_everything(config, checkpoint, state, method,
                                       tmp_path, tiny_data_dir)


_TINY_SWIN = dict(embed_dims=32, depths=(1, 1, 6, 1), num_heads=(1, 2, 4, 8))


@pytest.mark.parametrize('config,method,options', [
    (MMDET_SWIN, 'stvit-r', {}),
    (MMSEG_SWIN, 'dgssa', dict(static_init='uniform')),
])
def test_the_runner_reads_an_upstream_checkpoint_through_our_readers(
        config, method, options):
    """``load_from`` an upstream detector/segmentor checkpoint into the
    converted config's model: the hook converts the backbone part where it
    is in the host's layout, the report lists what loads, and only what
    the method replaces is unused."""
    upstream_cfg = load_upstream_config(config)
    upstream_cfg.model.backbone.update(_TINY_SWIN, init_cfg=None)
    upstream_cfg.model.pop('pretrained', None)
    heads = {'model.neck.in_channels': [32, 64, 128, 256]} if \
        method == 'stvit-r' else {
            'model.decode_head.in_channels': [32, 64, 128, 256],
            'model.auxiliary_head.in_channels': 128}
    upstream_cfg.merge_from_dict(heads)
    scope = upstream_cfg.default_scope
    state = _build(upstream_cfg.model, scope).state_dict()
    new = accelerate_config(upstream_cfg, method, **options)
    model = _build(new.model, scope)
    checkpoint = dict(state_dict=dict(state), meta=dict())
    hook = CheckpointCheckHook()
    runner = SimpleNamespace(model=model, _load_from='upstream.pth',
                             _resume=False)
    hook.after_load_checkpoint(runner, checkpoint)
    report = hook.report
    assert not report['missing'] and not report['mismatched'], report
    assert all(k.startswith('backbone.') for k in report['new'])
    model.load_state_dict(checkpoint['state_dict'], strict=False)
    own = model.state_dict()
    for key in report['loaded']:
        if key in state and 'relative_position_index' not in key:
            assert torch.equal(own[key], state[key]), key
    if method == 'dgssa':
        # read through DGSSA's reader: the static blocks' V from the host's
        # QKV (their Q and K dropped, their position tables folded into the
        # static logits, which are new); every other tensor loads
        assert not report['unused']
        assert any('Q and K dropped' in n for n in report['converted'])
        assert any(k.endswith('.v.weight') for k in report['loaded'])
        assert report['new'] and all(k.endswith('static_logits')
                                     for k in report['new'])
    else:
        # the same names: only the semantic blocks' position tables (all
        # of the unit but its first, image, block) are replaced
        assert not report['converted']
        assert report['unused'] and all(
            k.startswith('backbone.stages.2.blocks.') and k.endswith((
                'relative_position_bias_table', 'relative_position_index'))
            and '.blocks.0.' not in k for k in report['unused'])


def test_a_distilling_conversion_trains_a_step_and_predicts(
        tmp_path, tiny_deit, tiny_data_dir):
    """SaiT on a user's DeiT config: TokenPrunedClassifier with the
    upstream model as its TIS teacher, dense/sparse epochs, one step."""
    from mmvitaccel.tiny import tinyfy_config

    from .utils import assert_updated, train_and_predict_one_batch
    config, checkpoint, _ = tiny_deit
    out = tmp_path / 'sait.py'
    out.write_text(accelerated_config_text(config, str(out), 'sait',
                                           checkpoint))
    cfg = Config.fromfile(str(out))
    assert cfg.model.teacher.config == osp.join(str(tmp_path), 'deit.py')
    cfg.work_dir = str(tmp_path / 'work')
    cfg = tinyfy_config(cfg, data_root=str(tiny_data_dir))
    cfg.randomness = dict(seed=0)
    updates = {}
    losses, preds, _ = train_and_predict_one_batch(cfg, updates)
    assert 'loss_tis' in losses and torch.isfinite(losses['loss_tis'])
    assert_updated(updates)
    assert len(preds) == cfg.test_dataloader.batch_size


#: the classification study's trained rows (configs/study), the switch's
#: options that make each, and how they may differ from the switch's
#: conversion of the study's fine-tuning config:
#: AS-ViT's thresholds and tau were rounded to one digit (0.003 for
#: 0.0030625 = 0.001 * 196 / 64); HViT's config names its training form
#: (``deploy=False``) and AS-ViT its policy gradient, which the switch
#: leaves to the defaults; a teacher named by its config file is the model
#: that file builds (the study names the host's, the switch the config it
#: converted: the host with the study's schedule)
STUDY_ROWS = [('sait', {}, 'sait_digits.py', (), {}),
              ('asvit', {}, 'asvit_digits.py', ('thresholds', 'tau'),
               dict(policy_grad='secant')),
              ('hvit', {}, 'hvit_digits.py', (), dict(deploy=False)),
              ('integrated', {}, 'integrated_deit_digits.py', (), {}),
              ('tome', {}, 'tome_digits.py', (), {}),
              ('cls', {}, 'cls_digits.py', (), {}),
              ('cls', dict(merge_pruned=True), 'cls_merge_digits.py', (),
               {})]


def _weights_named_later(value):
    """``value`` without ``init_cfg`` and with every checkpoint None: the
    study names its host's weights at run time, the switch at conversion
    (``load_from``)."""
    if isinstance(value, dict):
        return {k: None if 'checkpoint' in k else _weights_named_later(v)
                for k, v in value.items() if k != 'init_cfg'}
    if isinstance(value, (list, tuple)):
        return [_weights_named_later(v) for v in value]
    return value


@pytest.mark.parametrize('method,options,config,rounded,defaults',
                         STUDY_ROWS)
def test_the_classification_studys_rows_are_the_switchs(
        method, options, config, rounded, defaults):
    """The trained rows of the classification study that the switch can
    make are its conversion of the study's fine-tuning config (the host
    with the study's schedule): the same model, teacher, optimizer,
    schedule and hooks, but for the rounding named in STUDY_ROWS (within
    2.5%)."""
    import inspect

    from mmvitaccel.registry import MODELS as OURS
    folder = osp.join(REPO, 'configs', 'study')
    switch = accelerate_config(
        osp.join(folder, '_base_', 'host_finetune.py'), method,
        checkpoint='host.pth', **options)
    study = Config.fromfile(osp.join(folder, config))
    ours, theirs = (_weights_named_later(c.model.to_dict())
                    for c in (study, switch))
    for model in (ours, theirs):
        if isinstance(model.get('teacher', {}).get('config'), str):
            model['teacher']['config'] = _weights_named_later(
                Config.fromfile(model['teacher']['config']).model.to_dict())
    if 'teacher' in ours and 'type' in ours['teacher']:
        # a teacher backbone is frozen in eval mode (drop path off), and
        # mmpretrain's ViT reads its class token by default
        teacher = theirs['teacher']
        assert teacher.pop('out_type', 'cls_token') == 'cls_token'
        teacher.pop('drop_path_rate', None)
    for key in rounded:
        a, b = (torch.tensor(c['backbone'].pop(key), dtype=torch.float64)
                for c in (ours, theirs))
        assert torch.allclose(a, b, rtol=0.025, atol=0), (key, a, b)
    backbone = OURS.get(ours['backbone']['type'].split('.')[-1])
    signature = inspect.signature(backbone.__init__).parameters
    for key, value in defaults.items():
        assert ours['backbone'].pop(key) == value == signature[key].default
        assert key not in theirs['backbone']
    assert ours == theirs
    for key in ('optim_wrapper', 'param_scheduler', 'train_cfg'):
        assert study[key] == switch[key], key
    # the switch also writes the checkpoint check, which the study's runs
    # get from our tools
    hooks = [{h['type'] for h in c.get('custom_hooks', [])
              if h['type'] not in ('mmvitaccel.StepSeedHook',
                                   'mmvitaccel.CheckpointCheckHook')}
             for c in (study, switch)]
    assert hooks[0] == hooks[1]
    assert 'mmvitaccel.CheckpointCheckHook' in {
        h['type'] for h in switch['custom_hooks']}
