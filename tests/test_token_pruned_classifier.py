"""TokenPrunedClassifier: distillation, budget loss (thresholds learn),
test-time settings, teacher from config + checkpoint, SaiT's alternate
epochs hook."""
from types import SimpleNamespace

import pytest
import torch
from mmpretrain.models.backbones import VisionTransformer
import torch.nn.functional as F
from mmengine.logging import MMLogger
from mmpretrain.structures import DataSample

import mmvitaccel  # noqa: F401
from mmvitaccel.engine import DenseSparseAlternateHook
from mmvitaccel.models.distill import build_teacher
from mmvitaccel.models.distill import load_teacher_weights
from mmvitaccel.ops import value_keep_count
from mmvitaccel.registry import MODELS

from .tolerance import assert_rounding_close

ARCH = dict(embed_dims=64, num_layers=4, num_heads=2, feedforward_channels=128)
HEAD = dict(type='VisionTransformerClsHead', num_classes=5, in_channels=64,
            loss=dict(type='CrossEntropyLoss'))
TEACHER = dict(
    type='ImageClassifier',
    backbone=dict(type='VisionTransformer', arch=ARCH, img_size=64,
                  patch_size=8),
    head=HEAD)


def _backbone(**kwargs):
    return dict(type='mmvitaccel.TokenPrunedVisionTransformer', arch=ARCH,
                img_size=64, patch_size=8, **kwargs)


def _samples(B):
    return [DataSample().set_gt_label(i % 5) for i in range(B)]


def _build(**kwargs):
    torch.manual_seed(0)
    model = MODELS.build(dict(type='mmvitaccel.TokenPrunedClassifier',
                              head=HEAD, **kwargs))
    model.init_weights()
    return model


def test_teacher_from_config_and_checkpoint(tmp_path):
    torch.manual_seed(1)
    source = build_teacher(dict(config=TEACHER))
    path = str(tmp_path / 'teacher.pth')
    torch.save({'state_dict': source.state_dict()}, path)
    teacher = build_teacher(dict(config=TEACHER, checkpoint=path))
    load_teacher_weights(teacher)  # building reads no weights
    for (k, a), b in zip(source.state_dict().items(),
                         teacher.state_dict().values()):
        assert torch.equal(a, b), k
    assert not any(p.requires_grad for p in teacher.parameters())
    model = _build(backbone=_backbone(), teacher=dict(
        config=TEACHER, init_cfg=dict(type='Pretrained', checkpoint=path)))
    assert not any(k.startswith('_teacher') or 'teacher' in k
                   for k in model.state_dict())
    with pytest.raises(ValueError, match='teacher'):
        _build(backbone=_backbone(), tis_distill_weight=4.)


@pytest.mark.parametrize('out_type', ['cls_token', 'avg_featmap'])
def test_teacher_logits_are_the_teachers_own(out_type):
    """The teacher's logits (one pass that also yields its tokens and last
    attention) equal its own forward, whatever its readout."""
    config = dict(TEACHER, backbone=dict(TEACHER['backbone'],
                                         out_type=out_type))
    model = _build(backbone=_backbone(), teacher=dict(config=config))
    with torch.no_grad():  # its head starts at zero: logits would be 0
        for p in model.teacher.head.parameters():
            p.add_(0.02 * torch.randn_like(p))
    model.double()  # the teacher follows
    x = torch.randn(2, 3, 64, 64, dtype=torch.double)
    logits, tokens, attn = model._teacher_outputs(x)
    with torch.no_grad():
        # float64, the probing pass against the plain forward: patch conv
        # (192), 4 layers of ~610 (norms, qkv, proj, fc1 of 64, fc2 128,
        # d = 32, 65 tokens twice), final norm and head: n < 3000
        assert_rounding_close(logits, model.teacher(x, mode='tensor'), 3000)
    assert tokens.shape == (2, 65, 64) and attn.shape == (2, 2, 65, 65)
    distilled = dict(TEACHER, backbone=dict(
        TEACHER['backbone'], type='DistilledVisionTransformer'))
    with pytest.raises(ValueError, match='one class token'):
        _build(backbone=_backbone(),
               teacher=dict(config=distilled))._teacher_outputs(x)


def test_thresholds_move_toward_the_budget():
    # thresholds near the scores (random weights give near-uniform class
    # attention, about 1/64) and a softer tau so that a few steps suffice
    model = _build(
        backbone=_backbone(prune_before=(1, 2, 3), scorer='asvit',
                       selector='threshold', mask_mode='policy', tau=5e-3,
                       thresholds=(0.01, 0.012, 0.014)),
        teacher=dict(config=TEACHER), token_distill_weight=0.5,
        budget=0.5)
    theta = model.backbone.thresholds
    start = theta.detach().clone()
    optim = torch.optim.Adam([theta], lr=2e-3)
    x = torch.randn(4, 3, 64, 64)
    model.train()
    ratios = []
    for _ in range(8):
        losses = model.loss(x, _samples(4))
        assert set(losses) >= {'loss', 'loss_distill', 'loss_token_distill',
                               'loss_budget'}
        optim.zero_grad()
        sum(losses.values()).backward()
        assert theta.grad is not None and (theta.grad != 0).any()
        optim.step()
        bb = model.backbone
        ratios.append(float(bb.analytic_flops().detach().mean() /
                            bb.dense_flops(65)))
    # dense FLOPs are above the budget: the thresholds rise, FLOPs fall
    assert (theta.detach() > start).all()
    assert ratios[-1] < ratios[0]


def test_tis_distillation_trains_the_early_layers_in_dense_epochs():
    model = _build(backbone=_backbone(prune_before=(2, )),
                   teacher=dict(config=TEACHER), distill_weight=0.,
                   tis_distill_weight=4.)
    model.train()
    model.backbone.set_pruning(prune=False)  # a dense epoch
    losses = model.loss(torch.randn(2, 3, 64, 64), _samples(2))
    assert 'loss_tis' in losses and 'loss_distill' not in losses
    losses['loss_tis'].backward()
    grad = model.backbone.layers[0].attn.qkv.weight.grad
    assert grad is not None and grad.abs().sum() > 0
    assert model.backbone.layers[3].attn.qkv.weight.grad is None


def test_test_cfg_applies_to_prediction_only():
    model = _build(backbone=_backbone(selector='value', density=0.5),
                   test_cfg=dict(density=0.25))
    model.eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        preds = model.predict(x)
        assert model.backbone.token_counts[0, -1] == 1 + value_keep_count(
            64, 0.25)
        assert model.backbone.density == 0.5  # restored
        model.set_test_cfg(density=1.0)
        dense = model.predict(x)
        reference = model.head.predict(
            VisionTransformer.forward(model.backbone, x))
    assert len(preds) == 2
    for a, b in zip(dense, reference):
        assert torch.equal(a.pred_score, b.pred_score)
    with pytest.raises(ValueError, match='test_cfg'):
        model.set_test_cfg(speed=2)


def test_budget_needs_thresholds():
    with pytest.raises(ValueError, match='threshold'):
        _build(backbone=_backbone(selector='mass'), budget=0.6)


def test_dense_sparse_alternate_hook():
    model = _build(backbone=_backbone())
    runner = SimpleNamespace(model=model, epoch=0,
                             logger=MMLogger.get_current_instance())
    hook = DenseSparseAlternateHook()
    seen = []
    for epoch in range(4):
        runner.epoch = epoch
        hook.before_train_epoch(runner)
        seen.append(model.backbone.prune)
        hook.after_train_epoch(runner)
        assert model.backbone.prune  # evaluation always prunes
    assert seen == [False, True, False, True]
    with pytest.raises(ValueError):
        DenseSparseAlternateHook(period=2, dense_epochs=3)


def test_kept_token_kl_with_dropped_tokens_of_different_counts():
    """Training may also drop tokens (value/mass selectors): the kept-token
    KL then compares each image's kept tokens, padding left out."""
    model = _build(backbone=_backbone(prune_before=(2, ), selector='mass',
                                      mass_threshold=0.5,
                                      train_execution='drop'),
                   teacher=dict(config=TEACHER), token_distill_weight=0.5)
    model.train()
    model.double()
    x = torch.randn(3, 3, 64, 64, dtype=torch.double) * torch.tensor(
        [0.3, 1., 3.], dtype=torch.double)[:, None, None, None]
    losses = model.loss(x, _samples(3))
    counts = model.backbone.keep_masks[0].sum(-1).tolist()
    assert len(set(counts)) > 1, counts
    bb = model.backbone
    assert bb.final_tokens.shape[1] == 1 + max(counts)
    # the same number by hand, image by image
    teacher = model._teacher_outputs(x)[1]
    kls, n, logs = 0., 0, 0.
    for b in range(3):
        kept = bb.keep_masks[0][b].nonzero().flatten()
        s = bb.final_tokens[b, 1:1 + len(kept)]
        t = teacher[b, 1:][kept]
        kls = kls + (F.softmax(t, -1) * (F.log_softmax(t, -1) -
                                         F.log_softmax(s, -1))).sum()
        n += len(kept)
        logs = max(logs, float(F.log_softmax(t, -1).abs().max() +
                               F.log_softmax(s, -1).abs().max()))
    # float64, another order: log-sum-exps and KL rows of 64 channels, the
    # sum over <= 3 x 64 kept tokens; each term is p |log p_t - log p_s|
    assert_rounding_close(losses['loss_token_distill'].detach(),
                          0.5 * kls.detach() / n, 3 * 64 + 3 * 64, logs)
