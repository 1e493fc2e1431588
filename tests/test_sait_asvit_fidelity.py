"""SaiT and AS-ViT as their papers set them: the DINO ViT-S/16 teacher of
SaiT's TIS distillation (its checkpoint layout, the head-less rule), the
DeiT-S schedule of the SaiT configs, AS-ViT's DeiT configs without the
kept-token KL, and the paper variants (SaiT-S/V0.5†, AS-DeiT-S at 50%)."""
import glob
import os.path as osp
from collections import OrderedDict

import pytest
import torch
import torch.nn.functional as F
from mmengine.config import Config
from mmpretrain.structures import DataSample

import mmvitaccel  # noqa: F401
from mmvitaccel.registry import MODELS

from .tolerance import assert_equal, assert_rounding_close

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))

# a tiny ViT on a 8x8 grid of 8-pixel patches, in the student's and the
# teacher's shapes
C, DEPTH, HEADS, FFN, PATCH, IMG = 32, 3, 4, 64, 8, 64
ARCH = dict(embed_dims=C, num_layers=DEPTH, num_heads=HEADS,
            feedforward_channels=FFN)
HEAD = dict(type='VisionTransformerClsHead', num_classes=5, in_channels=C,
            loss=dict(type='CrossEntropyLoss'))
#: a DINO ViT in mmpretrain's classes: no classifier head
DINO_TEACHER = dict(
    type='ImageClassifier',
    backbone=dict(type='VisionTransformer', arch=ARCH, img_size=IMG,
                  patch_size=PATCH),
    head=None)


def _dino_layout_state_dict(seed=0):
    """Random weights under the key names of DINO's released ViT backbone
    (timm's ViT with ``num_classes=0``: no ``head.*``)."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=0.2, offset=0.):
        return offset + scale * torch.randn(*shape, generator=g)

    n = (IMG // PATCH)**2
    sd = OrderedDict()
    sd['cls_token'] = rnd(1, 1, C)
    sd['pos_embed'] = rnd(1, 1 + n, C)
    sd['patch_embed.proj.weight'] = rnd(C, 3, PATCH, PATCH, scale=0.05)
    sd['patch_embed.proj.bias'] = rnd(C)
    for i in range(DEPTH):
        b = f'blocks.{i}.'
        for norm in ('norm1', 'norm2'):
            sd[b + norm + '.weight'] = rnd(C, scale=0.1, offset=1.)
            sd[b + norm + '.bias'] = rnd(C, scale=0.1)
        sd[b + 'attn.qkv.weight'] = rnd(3 * C, C)
        sd[b + 'attn.qkv.bias'] = rnd(3 * C)
        sd[b + 'attn.proj.weight'] = rnd(C, C)
        sd[b + 'attn.proj.bias'] = rnd(C)
        sd[b + 'mlp.fc1.weight'] = rnd(FFN, C)
        sd[b + 'mlp.fc1.bias'] = rnd(FFN)
        sd[b + 'mlp.fc2.weight'] = rnd(C, FFN)
        sd[b + 'mlp.fc2.bias'] = rnd(C)
    sd['norm.weight'] = rnd(C, scale=0.1, offset=1.)
    sd['norm.bias'] = rnd(C, scale=0.1)
    return sd


def _reference_last_attention(sd, images):
    """The last block's softmax attention of a pre-norm ViT read straight
    from a DINO-layout state dict (LayerNorm eps 1e-6, as DINO's ViTs).

    Returns:
        tuple: the attention ``(B, heads, 1 + N, 1 + N)`` and a bound of
        its logits' summed magnitudes, ``d max|q| max|k| / sqrt(d)``.
    """
    B = images.shape[0]
    x = F.conv2d(images, sd['patch_embed.proj.weight'],
                 sd['patch_embed.proj.bias'], stride=PATCH)
    x = torch.cat([sd['cls_token'].expand(B, -1, -1),
                   x.flatten(2).transpose(1, 2)], dim=1) + sd['pos_embed']
    T, d = x.shape[1], C // HEADS

    def norm(t, name):
        return F.layer_norm(t, (C, ), sd[name + '.weight'],
                            sd[name + '.bias'], eps=1e-6)

    for i in range(DEPTH):
        b = f'blocks.{i}.'
        q, k, v = F.linear(norm(x, b + 'norm1'), sd[b + 'attn.qkv.weight'],
                           sd[b + 'attn.qkv.bias']).reshape(
                               B, T, 3, HEADS, d).permute(2, 0, 3, 1, 4)
        attn = (q @ k.transpose(-2, -1) / d**0.5).softmax(dim=-1)
        if i == DEPTH - 1:
            return attn, d**0.5 * float(q.abs().max() * k.abs().max())
        y = (attn @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, sd[b + 'attn.proj.weight'],
                         sd[b + 'attn.proj.bias'])
        h = F.gelu(F.linear(norm(x, b + 'norm2'), sd[b + 'mlp.fc1.weight'],
                            sd[b + 'mlp.fc1.bias']))
        x = x + F.linear(h, sd[b + 'mlp.fc2.weight'], sd[b + 'mlp.fc2.bias'])


def _sait(teacher, **kwargs):
    torch.manual_seed(0)
    cfg = dict(
        type='mmvitaccel.TokenPrunedClassifier',
        backbone=dict(type='mmvitaccel.TokenPrunedVisionTransformer',
                      arch=ARCH, img_size=IMG, patch_size=PATCH,
                      prune_before=(1, ), scorer='tis', selector='value',
                      density=0.5),
        head=HEAD, teacher=teacher, tis_distill_weight=4.)
    cfg.update(kwargs)
    model = MODELS.build(cfg)
    model.init_weights()
    return model


@pytest.mark.parametrize('form', ['released', 'training'])
def test_dino_checkpoint_loads_into_the_headless_teacher(tmp_path, form):
    """DINO's layout (the released backbone, or the ``teacher`` of a
    training checkpoint beside its projection head and the student) loads
    with nothing missing or unused, and the attention the TIS loss reads
    is the reference computation's."""
    sd = _dino_layout_state_dict()
    if form == 'released':
        saved = sd
    else:
        saved = dict(
            teacher=OrderedDict([('module.backbone.' + k, v)
                                 for k, v in sd.items()] +
                                [('module.head.last_layer.weight_g',
                                  torch.ones(7, 1))]),
            student={'module.backbone.' + k: torch.zeros_like(v)
                     for k, v in sd.items()},
            epoch=100)
    path = str(tmp_path / 'dino.pth')
    torch.save(saved, path)
    model = _sait(dict(config=DINO_TEACHER,
                       init_cfg=dict(type='Pretrained', checkpoint=path)),
                  distill_weight=0.)
    report = model.teacher_load_reports['teacher']
    assert report['missing'] == [] and report['unused'] == []
    assert report['mismatched'] == []
    assert len(report['loaded']) == len(sd) == len(model.teacher.state_dict())

    model.double()  # the teacher follows
    images = torch.randn(2, 3, IMG, IMG, dtype=torch.double)
    logits, _, attn = model._teacher_outputs(images)
    assert logits is None  # head-less
    reference, logit_scale = _reference_last_attention(
        {k: v.double() for k, v in sd.items()}, images)
    # float64: patch conv (192), 2 layers of ~390 (norms, qkv, proj, fc1 of
    # 32, fc2 64, d = 8, 65 tokens twice), the last logits and softmax: n <
    # 1200; a logit's rounding moves its probability by as much, relative
    assert_rounding_close(attn, reference, 1200, logit_scale)
    target = reference[:, :, 0, 1:].mean(dim=1)
    assert_rounding_close(model.tis_target(attn),  # (the same formula)
                          target / target.sum(-1, keepdim=True), 1200 + 64,
                          logit_scale)
    losses = model.loss(images, [DataSample().set_gt_label(i)
                                 for i in range(2)])
    assert 'loss_tis' in losses and 'loss_distill' not in losses
    assert torch.isfinite(losses['loss_tis'])


def test_dino_state_dict_picks_the_training_checkpoints_network():
    from mmvitaccel.models.utils.checkpoint import dino_state_dict
    sd = _dino_layout_state_dict()
    wrapped = dict(teacher={'module.backbone.' + k: v for k, v in sd.items()},
                   student={'module.backbone.' + k: -v
                            for k, v in sd.items()})
    teacher = dino_state_dict(wrapped)
    student = dino_state_dict(wrapped, checkpoint_key='student')
    assert 'layers.0.ffn.layers.0.0.weight' in teacher and 'ln1.bias' in \
        teacher
    assert_equal(student['layers.0.attn.qkv.weight'],
                 -teacher['layers.0.attn.qkv.weight'])
    with pytest.raises(ValueError, match='checkpoint_key'):
        dino_state_dict(wrapped, checkpoint_key='backbone')


def test_headless_teacher_refuses_logit_distillation():
    with pytest.raises(ValueError, match='distill_weight=0.5.*no '
                       'classification head'):
        _sait(dict(config=DINO_TEACHER), distill_weight=0.5)


def _load(name):
    return Config.fromfile(osp.join(REPO, 'configs', name))


SAIT = sorted(
    osp.basename(p) for p in glob.glob(osp.join(REPO, 'configs', 'sait_*.py')))


@pytest.mark.parametrize('name', SAIT)
def test_sait_configs_use_the_deit_s_schedule(name):
    """"The same training schedules as DeiT-S": drop path 0.1 and 5 linear
    warm-up epochs before the cosine decay."""
    cfg = _load(name)
    assert cfg.model.backbone.drop_path_rate == 0.1
    warmup, cosine = cfg.param_scheduler
    assert warmup.type == 'LinearLR' and warmup.by_epoch
    assert (warmup.get('begin', 0), warmup.end) == (0, 5)
    assert cosine.type == 'CosineAnnealingLR' and cosine.begin == 5
    assert cfg.train_cfg.max_epochs == 300


def test_sait_m07_distils_from_dino():
    cfg = _load('sait_deit_s_m07_in1k.py')
    teacher = cfg.model.teacher
    assert teacher.config.head is None
    assert teacher.config.backbone.arch == 'deit-small'
    assert teacher.config.backbone.patch_size == 16
    assert teacher.init_cfg.checkpoint.endswith(
        'dino_deitsmall16_pretrain.pth')
    assert cfg.model.distill_weight == 0 and cfg.model.tis_distill_weight == 4
    # builds offline (no weights read), with the DINO converter
    model = MODELS.build(cfg.model)
    assert not model.teacher.with_head
    assert model.teacher.backbone.embed_dims == 384


def test_sait_variants():
    m07 = _load('sait_deit_s_m07_in1k.py').model.to_dict()
    deit = _load('sait_deit_s_m07_deit_teacher_in1k.py').model.to_dict()
    assert deit.pop('teacher')['config'] == \
        'mmpretrain::deit/deit-small_4xb256_in1k.py'
    assert m07.pop('teacher') != {} and deit == m07
    dagger = _load('sait_deit_s_v05_dino_in1k.py').model
    plain = _load('sait_deit_s_v05_in1k.py').model
    assert (dagger.backbone.selector, dagger.backbone.density) == ('value',
                                                                   0.5)
    assert dagger.test_cfg.to_dict() == dict(density=0.5)
    assert dagger.tis_distill_weight == 4 and dagger.distill_weight == 0
    assert dagger.teacher.config.head is None
    assert dagger.backbone.to_dict() == plain.backbone.to_dict()


@pytest.mark.parametrize('name', ['asvit_deit_s_in1k.py',
                                  'asvit_deit_t_in1k.py',
                                  'asvit_deit_s_b050_in1k.py'])
def test_asvit_deit_has_no_token_alignment(name):
    """AS-ViT aligns the tokens only for LV-ViT-like models (a linear layer
    on all tokens); DeiT keeps the logit KL alone."""
    model = _load(name).model
    assert model.token_distill_weight == 0
    assert model.distill_weight == 0.5 and model.teacher is not None


def test_asvit_half_budget():
    cfg = _load('asvit_deit_s_b050_in1k.py')
    base = _load('asvit_deit_s_in1k.py')
    assert cfg.model.budget == 0.5
    cfg.model.budget = base.model.budget
    assert cfg.to_dict() == base.to_dict()


@pytest.mark.parametrize('name', ['asvit_deit_s_in1k.py',
                                  'asvit_deit_t_in1k.py'])
def test_asvit_thresholds_have_the_models_lr(name):
    """The paper gives the thresholds no learning rate of their own; they
    move at the model's (measured), so no multiplier; no weight decay."""
    cfg = _load(name)
    keys = cfg.optim_wrapper.paramwise_cfg.custom_keys
    assert keys['.thresholds'].to_dict() == dict(decay_mult=0.0)
    assert cfg.optim_wrapper.optimizer.lr == 2e-5
