"""The shared distillation core (mmvitaccel/models/distill): teachers built
without weights (offline), loaded in init_weights with a report, frozen,
in eval mode, outside the state dict, following the model's device and
dtype; one KD loss for both classifiers; checkpoints of the earlier
convention (teacher inside the state dict) still load."""
import copy
import glob
import logging
import os.path as osp
import socket
import urllib.request

import pytest
import torch
from mmengine.config import Config
from mmengine.logging import MMLogger
from mmengine.registry import DefaultScope
from mmengine.runner.checkpoint import CheckpointLoader, load_state_dict
from mmpretrain.models import ImageClassifier, VisionTransformer
from mmpretrain.structures import DataSample

import mmvitaccel  # noqa: F401
from mmvitaccel.models import GLADDistillClassifier, TokenPrunedClassifier
from mmvitaccel.models.dgssa import glad_distill_classifier as glad_mod
from mmvitaccel.models.token_pruning import token_pruned_classifier as tp_mod
from mmvitaccel.models.distill import (TeacherMixin, build_teacher,
                                       kl_divergence, load_teacher_weights)
from mmvitaccel.registry import MODELS

from .tolerance import assert_equal, assert_rounding_close
from .utils import REPO

ARCH = dict(embed_dims=64, num_layers=8, num_heads=4, feedforward_channels=128)
HEAD = dict(type='mmpretrain.VisionTransformerClsHead', num_classes=5,
            in_channels=64)
VIT = dict(type='mmpretrain.VisionTransformer', arch=ARCH, img_size=64,
           patch_size=16)
TEACHER = dict(type='ImageClassifier',
               backbone=dict(type='VisionTransformer', arch=ARCH, img_size=64,
                             patch_size=16),
               head=dict(type='VisionTransformerClsHead', num_classes=5,
                         in_channels=64))
DISTILL_CONFIGS = sorted(
    path for pattern in ('asvit_*.py', 'sait_*.py', 'integrated_deit_*.py')
    for path in glob.glob(osp.join(REPO, 'configs', pattern)))


def _glad(**kwargs):
    kwargs = dict(dict(teacher=VIT, teacher_head=HEAD), **kwargs)
    return GLADDistillClassifier(
        backbone=dict(type='mmvitaccel.DGSSAVisionTransformer', arch=ARCH,
                      img_size=64, patch_size=16, static_init='uniform',
                      glad_tokens=(13, 9, 5)),
        head=HEAD, **kwargs)


def _pruned(**kwargs):
    kwargs = dict(dict(teacher=dict(config=TEACHER)), **kwargs)
    return MODELS.build(dict(
        type='mmvitaccel.TokenPrunedClassifier',
        backbone=dict(type='mmvitaccel.TokenPrunedVisionTransformer',
                      arch=ARCH, img_size=64, patch_size=16,
                      prune_before=(2, ), density=0.5),
        head=dict(HEAD, type='VisionTransformerClsHead'), **kwargs))


def _source_classifier(seed=3):
    """A trained-looking DeiT classifier whose weights a test writes out."""
    torch.manual_seed(seed)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(copy.deepcopy(TEACHER))
    model.init_weights()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    return model


class _Notes(logging.Handler):
    """Collects the warnings of the current MMLogger."""

    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def notes():
    handler = _Notes()
    logger = MMLogger.get_current_instance()
    logger.addHandler(handler)
    yield handler.messages
    logger.removeHandler(handler)


@pytest.fixture
def offline(monkeypatch):
    """No network and no checkpoint reading: any attempt raises."""

    def refuse(*args, **kwargs):
        raise AssertionError(f'weights or network touched: {args[:2]}')

    monkeypatch.setattr(socket.socket, 'connect', refuse)
    monkeypatch.setattr(socket, 'create_connection', refuse)
    monkeypatch.setattr(urllib.request, 'urlopen', refuse)
    monkeypatch.setattr(CheckpointLoader, 'load_checkpoint', refuse)
    monkeypatch.setattr(torch, 'load', refuse)


def _teachers(model):
    return [t for t in (model.get_teacher(n) for n in model.teacher_names)
            if t is not None]


def _assert_held_outside(model):
    own = {id(p) for p in model.parameters()}
    for teacher in _teachers(model):
        assert not teacher.training
        assert not any(p.requires_grad for p in teacher.parameters())
        assert not own & {id(p) for p in teacher.parameters()}
    assert not any(k.split('.')[0] in model.teacher_names
                   for k in model.state_dict())


# --- building reads no weights -----------------------------------------------


@pytest.mark.parametrize('config', DISTILL_CONFIGS,
                         ids=[osp.basename(p) for p in DISTILL_CONFIGS])
def test_every_distillation_config_builds_offline(config, offline):
    cfg = Config.fromfile(config)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(cfg.model)
    assert isinstance(model, TeacherMixin)
    assert (model.teacher is not None) == (cfg.model.get('teacher')
                                           is not None)
    _assert_held_outside(model)
    # where the weights will come from is recorded, not read
    for teacher in _teachers(model):
        assert teacher.init_cfg['type'] == 'Pretrained'


# --- init_weights loads, with a report ---------------------------------------


def test_init_weights_loads_the_teacher_with_a_report(tmp_path):
    source = _source_classifier()
    path = str(tmp_path / 'teacher.pth')
    torch.save(dict(state_dict={f'module.{k}': v for k, v in
                                source.state_dict().items()}), path)
    # token pruning: a whole classifier, from init_cfg or checkpoint=
    for teacher in (dict(config=TEACHER, checkpoint=path),
                    dict(config=TEACHER, init_cfg=dict(type='Pretrained',
                                                       checkpoint=path))):
        model = _pruned(teacher=teacher)
        assert not torch.equal(model.teacher.head.layers.head.weight,
                               source.head.layers.head.weight)
        model.init_weights()
        report = model.teacher_load_reports['teacher']
        assert not report['missing'] and not report['unused']
        for k, v in source.state_dict().items():
            assert torch.equal(model.teacher.state_dict()[k], v), k
        _assert_held_outside(model)
    # GLAD: a backbone by prefix 'backbone.' (or teacher_checkpoint) and a
    # head by prefix 'head.', both from the same classifier checkpoint
    for kwargs in (
            dict(teacher=dict(VIT, init_cfg=dict(
                type='Pretrained', checkpoint=path, prefix='backbone.'))),
            dict(teacher_checkpoint=path)):
        model = _glad(teacher_head=dict(HEAD, init_cfg=dict(
            type='Pretrained', checkpoint=path, prefix='head.')), **kwargs)
        model.init_weights()
        assert not model.teacher_load_report['missing']
        assert not model.teacher_load_reports['teacher_head']['missing']
        for k, v in source.backbone.state_dict().items():
            assert torch.equal(model.teacher.state_dict()[k], v), k
        assert torch.equal(model.teacher_head.layers.head.weight,
                           source.head.layers.head.weight)
        _assert_held_outside(model)


def test_a_wrong_teacher_checkpoint_is_refused(tmp_path):
    path = str(tmp_path / 'other.pth')
    torch.save({'conv.weight': torch.zeros(3, 3)}, path)
    model = _pruned(teacher=dict(config=TEACHER, checkpoint=path))
    with pytest.raises(ValueError, match='not a checkpoint of this model'):
        model.init_weights()


def test_a_random_teacher_is_initialised_from_the_seed():
    """No checkpoint (tests, tiny runs): the teacher's own init_weights,
    a function of the seed, so every rank and a resumed run agree."""
    states = []
    for _ in range(2):
        torch.manual_seed(0)
        model = _pruned()
        model.init_weights()
        assert model.teacher_load_reports['teacher'] is None
        assert model.teacher.is_init
        states.append(model.teacher.state_dict())
    for k in states[0]:
        assert torch.equal(states[0][k], states[1][k]), k


# --- frozen, eval, device ----------------------------------------------------


@pytest.mark.parametrize('build', [_glad, _pruned], ids=['glad', 'pruned'])
def test_teacher_stays_frozen_in_eval_and_follows_the_model(build):
    torch.manual_seed(0)
    model = build()
    model.init_weights()
    clone = copy.deepcopy(model)  # e.g. an EMA copy gets its own teacher
    assert clone.teacher is not model.teacher
    for k, v in clone.teacher.state_dict().items():
        assert torch.equal(v, model.teacher.state_dict()[k]), k
    model.train()
    assert model.training and model.backbone.training
    _assert_held_outside(model)
    x = torch.randn(2, 3, 64, 64)
    samples = [DataSample().set_gt_label(i) for i in (0, 3)]
    losses = model.loss(x, samples)
    sum(v for k, v in losses.items() if k.startswith('loss')).backward()
    for teacher in _teachers(model):
        assert all(p.grad is None for p in teacher.parameters())
    model.to(torch.float64)
    for teacher in _teachers(model):
        assert all(p.dtype == torch.float64 for p in teacher.parameters())
    model.float()
    if torch.cuda.is_available():
        model.cuda()
        for teacher in _teachers(model):
            assert all(p.is_cuda for p in teacher.parameters())
        model.loss(x.cuda(), samples)


# --- one KD loss -------------------------------------------------------------


def test_kl_divergence_is_the_formula_and_soft_ce_has_its_gradient():
    torch.manual_seed(0)
    s = torch.randn(4, 7, dtype=torch.double)
    t = torch.randn(4, 7, dtype=torch.double) * 2
    for temp in (1., 2.5):
        p_t = (t / temp).softmax(-1)
        log_s = (s / temp).log_softmax(-1)
        ref = temp**2 * (p_t * (p_t.log() - log_s)).sum(-1)
        # float64, K = 7: log-sum-exp and KL sums (2 K terms) of the
        # logs, which reach max |log p| (the p_t weights sum to 1)
        scale = temp**2 * float(torch.cat([p_t.log(), log_s]).abs().max())
        assert_rounding_close(kl_divergence(s, t, temp), ref, 2 * 7, scale)
    # the same log_softmax of the same rows: log_t - log_s is exactly 0
    assert_equal(kl_divergence(t, t), torch.zeros(4, dtype=torch.double))
    # at T = 1, KL and the soft cross-entropy differ by the teacher's
    # entropy only: same gradient for the student (float64: softmax sums of
    # K = 7 terms, scale 1, the largest probability)
    s1 = s.clone().requires_grad_()
    s2 = s.clone().requires_grad_()
    kl_divergence(s1, t).mean().backward()
    (-(t.softmax(-1) * s2.log_softmax(-1)).sum(-1)).mean().backward()
    assert_rounding_close(s1.grad, s2.grad, 2 * 7, 1.)
    for bad in (0, -1., float('nan'), 'hot', True):
        with pytest.raises(ValueError, match='temperature'):
            kl_divergence(s, t, bad)
    with pytest.raises(ValueError, match='distill_temperature'):
        _pruned(distill_temperature=0.)


def test_both_classifiers_use_the_one_kd_loss():
    """loss_kd (GLAD) and loss_distill (token pruning) are weight x the
    shared kl_divergence of the student's and the teacher's logits."""
    assert glad_mod.kl_divergence is kl_divergence
    assert tp_mod.kl_divergence is kl_divergence
    for cls in (GLADDistillClassifier, TokenPrunedClassifier):
        assert issubclass(cls, TeacherMixin)
        for name in ('train', '_apply', 'add_teacher', 'get_teacher'):
            assert name not in vars(cls), (cls.__name__, name)
    x = torch.randn(2, 3, 64, 64, dtype=torch.double)
    samples = [DataSample().set_gt_label(i) for i in (1, 2)]

    def perturbed(model):
        """Off the init (the heads start at zero: every KL would be 0),
        in float64: the loss and its recomputation without gradients may
        take other kernels, and then differ by rounding only."""
        model.init_weights()
        with torch.no_grad():
            for m in (model, *_teachers(model)):
                for p in m.parameters():
                    p.add_(0.02 * torch.randn_like(p))
        return model.double()

    # 8 layers of C = 64 (qkv, proj, fc1 64, fc2 128, d = 16, 17 tokens
    # twice, 2 norms of 64: ~500 each), head and KL: n < 5000, scale 1
    terms = 5000
    torch.manual_seed(0)
    model = perturbed(_glad(kd_weight=0.5))
    losses = model.loss(x, samples)
    with torch.no_grad():
        student = model.head(model.backbone(x))
        teacher = model.teacher_head(model.teacher(x))
    assert losses['loss_kd'] > 1e-3  # not the trivial 0 = 0
    assert_rounding_close(losses['loss_kd'].detach(),
                          0.5 * kl_divergence(student, teacher).mean(), terms)
    torch.manual_seed(0)
    model = perturbed(_pruned(distill_weight=0.7, distill_temperature=2.))
    model.backbone.set_pruning(prune=False)
    losses = model.loss(x, samples)
    with torch.no_grad():
        student = model.head(model.extract_feat(x))
        teacher = model.teacher(x, mode='tensor')
    assert losses['loss_distill'] > 1e-3
    assert_rounding_close(
        losses['loss_distill'].detach(),
        0.7 * kl_divergence(student, teacher, 2.).mean(), terms)


# --- checkpoints of either convention ----------------------------------------


def _old_glad_state(model):
    """The state dict an earlier GLAD classifier wrote: its teacher and
    teacher head inside."""
    state = model.state_dict()
    for name in ('teacher', 'teacher_head'):
        for k, v in model.get_teacher(name).state_dict().items():
            state[f'{name}.{k}'] = v.clone() + 1.
    return state


def test_a_checkpoint_with_the_teacher_inside_loads(notes):
    torch.manual_seed(0)
    writer = _glad()
    writer.init_weights()
    old = _old_glad_state(writer)
    torch.manual_seed(1)
    model = _glad()
    model.init_weights()
    # the runner's loader (resume, load_from) walks the modules itself
    load_state_dict(model, old, strict=True)
    for k, v in model.state_dict().items():
        assert torch.equal(v, old[k]), k
    for name in ('teacher', 'teacher_head'):
        for k, v in model.get_teacher(name).state_dict().items():
            assert torch.equal(v, old[f'{name}.{k}']), k
        assert any(f'go to the frozen {name}' in m for m in notes)
    _assert_held_outside(model)
    # into the plain student (no teacher): teacher keys and the training
    # only teacher-side GLADs are dropped, with a note
    plain = _glad(teacher=None, teacher_head=None)
    plain.load_state_dict(old, strict=True)
    assert any('this model has no teacher_glads' in m for m in notes)
    assert any('this model has no teacher_head' in m for m in notes)


def test_a_checkpoint_without_the_teacher_loads_and_deploys(notes):
    torch.manual_seed(0)
    writer = _pruned()
    writer.init_weights()
    new = writer.state_dict()
    assert not any(k.startswith('teacher') for k in new)
    torch.manual_seed(1)
    model = _pruned()
    model.init_weights()
    teacher = copy.deepcopy(model.teacher.state_dict())
    model.load_state_dict(new, strict=True)  # e.g. resume: teacher kept
    for k, v in model.teacher.state_dict().items():
        assert torch.equal(v, teacher[k]), k
    # deployment: the student's checkpoint is the plain student's
    plain = ImageClassifier(
        backbone=dict(type='mmvitaccel.TokenPrunedVisionTransformer',
                      arch=ARCH, img_size=64, patch_size=16,
                      prune_before=(2, ), density=0.5),
        head=dict(HEAD, type='VisionTransformerClsHead'))
    plain.load_state_dict(new, strict=True)
    _pruned(teacher=None).load_state_dict(new, strict=True)
    assert not [m for m in notes if 'checkpoint' in m]  # nothing to migrate
    # GLAD without a teacher in the state dict loads strictly too
    glad = _glad()
    glad.init_weights()
    _glad().load_state_dict(glad.state_dict(), strict=True)


def test_build_teacher_errors():
    with pytest.raises(ValueError, match='teacher must be'):
        build_teacher('deit')
    with pytest.raises(ValueError, match=r"unknown teacher keys \['checkp"):
        build_teacher(dict(config=TEACHER, checkpiont='x.pth'))
    with pytest.raises(ValueError, match='teacher name must be one of'):
        _pruned().add_teacher('mentor', VIT)
    vit = VisionTransformer(arch=ARCH, img_size=64, patch_size=16)
    vit.init_weights()
    weights = copy.deepcopy(vit.state_dict())
    teacher = build_teacher(vit)  # a module is used as it is
    assert teacher is vit and not vit.training
    assert load_teacher_weights(teacher) is None
    for k, v in teacher.state_dict().items():
        assert torch.equal(v, weights[k]), k
