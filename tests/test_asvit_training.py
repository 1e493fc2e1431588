"""AS-ViT trains (issue: its gradients exploded on the digits host).

The cause (``docs/token_pruning_design.md``, "Why AS-ViT's gradients
exploded"): in the policy softmax the derivative of a row's output with
respect to a pruned key's gate is ``w / Z``, the key's would-be weight over
the visible ones, unbounded when the key's logit lies far above the row's
visible peak. The default ``policy_grad='secant'`` bounds it. These tests
build a small AS-ViT whose attention is peaked like a trained host's (so
that pruned keys do hold large logits) and check

* one training step: the threshold's gradient stays below the bound the
  secant reading gives, and the paper's tangent reading (the code before the
  fix) breaks it on the same step;
* the budget loss drives the thresholds: with ``budget_weight`` at 0 and at
  its default, the same steps move the thresholds differently, higher where
  the budget asks for fewer FLOPs.
"""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from mmpretrain.structures import DataSample

import mmvitaccel  # noqa: F401
import mmvitaccel.models.token_pruning.token_pruning_layer as pruning_layer
from mmvitaccel.ops import (batch_mean_keep_mask, masked_attention,
                            threshold_keep_mask, vit_layer_flops)
from mmvitaccel.registry import MODELS

from .tolerance import assert_equal, assert_rounding_close

C, DEPTH, HEADS, FFN, PATCH, IMG, CLASSES = 32, 4, 2, 64, 8, 32, 5
N = (IMG // PATCH)**2  # 16 patches
T = N + 1
ARCH = dict(embed_dims=C, num_layers=DEPTH, num_heads=HEADS,
            feedforward_channels=FFN)
TAU = 5e-3  # wide enough that a batch of 4 has tokens near each threshold


def _model(prune_before, thresholds, budget_weight=2., policy_grad='secant',
           seed=0, budget=0.5):
    """A small AS-ViT whose queries and keys are scaled up: its attention
    logits spread over tens of units, as a trained host's do (random
    initialisation gives logits near 0, where no gate gradient is large)."""
    torch.manual_seed(seed)
    model = MODELS.build(dict(
        type='mmvitaccel.TokenPrunedClassifier',
        backbone=dict(type='mmvitaccel.TokenPrunedVisionTransformer',
                      arch=ARCH, img_size=IMG, patch_size=PATCH,
                      prune_before=prune_before, scorer='asvit',
                      selector='threshold', thresholds=thresholds, tau=TAU,
                      mask_mode='policy', policy_grad=policy_grad),
        head=dict(type='VisionTransformerClsHead', num_classes=CLASSES,
                  in_channels=C, loss=dict(type='CrossEntropyLoss')),
        budget=budget, budget_weight=budget_weight))
    model.init_weights()
    with torch.no_grad():
        for layer in model.backbone.layers:
            layer.attn.qkv.weight[:2 * C].normal_(0., 0.6)
        for p in model.head.parameters():  # the head starts at zero
            p.normal_(0., 0.1)
    model.train()
    return model


def _batch(seed=1, B=4):
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(B, 3, IMG, IMG, generator=g)
    labels = torch.randint(0, CLASSES, (B, ), generator=g)
    return images, [DataSample().set_gt_label(int(y)) for y in labels]


class _Recorder:
    """Wraps the layers' policy softmax: keeps each call's values ``v``,
    output ``o``, and (after the backward) the gradient ``g = dL/do``, and
    the largest logit gap of a hidden key over its row's visible peak."""

    def __init__(self):
        self.calls = []
        self.gap = float('-inf')
        self.real = pruning_layer.masked_attention

    def __call__(self, q, k, v, scale, policy=None, mode='logits', **kw):
        ctx, attn = self.real(q, k, v, scale, policy, mode, **kw)
        if policy is not None and mode == 'policy':
            ctx.retain_grad()
            self.calls.append((v.detach(), ctx))
            with torch.no_grad():
                logits = q @ k.transpose(-2, -1) * scale
                hidden = (policy <= 0)[:, None, None, :].expand_as(logits)
                eye = torch.eye(logits.shape[-1], dtype=torch.bool)
                hidden = hidden & ~eye
                peak = logits.masked_fill(hidden, float('-inf')).amax(
                    -1, keepdim=True)
                gaps = (logits - peak).masked_fill(~hidden, float('-inf'))
                self.gap = max(self.gap, float(gaps.max()))
        return ctx, attn


def _threshold_gradient_and_bound(model, monkeypatch):
    """One training step's gradient on the (single) threshold, and its
    bound.

    The threshold enters only through the straight-through mask ``M_i =
    sigmoid((S_i - theta) / tau)`` (value: the hard mask), whose slope is at
    most ``1 / (4 tau)``, so ``|dL/dtheta| <= 1/(4 tau) sum_{b,i}
    |dL/dM_bi|``. ``M_bi`` gates key ``i`` in the policy softmax of every
    later layer and adds to the token count of the budget loss:

    * softmax: ``dL/dG_i = sum_{l,h,r} g_lhr . (v_lhi - o_lhr) c_lhri``,
      with ``c = w / (Z + (1 - G) w) <= 1`` in the secant reading
      (``c = w / Z``, unbounded, in the tangent one), so
      ``|.| <= sum_{l,h,r} ||g_lhr|| ||v_lhi - o_lhr||``;
    * budget: ``lambda1 / B * sum_{l >= s} F'(n_l) / F_dense``, with
      ``F'(n) <= F'(T)`` (``F`` is convex in ``n``; the final norm, ``5 C``
      per token, is in ``F`` too).

    Returns:
        tuple[float, float, float]: the gradient, the bound, the largest
        logit gap of a hidden key above its row's visible peak.
    """
    recorder = _Recorder()
    monkeypatch.setattr(pruning_layer, 'masked_attention', recorder)
    images, samples = _batch()
    losses = model.loss(images, samples)
    sum(losses.values()).backward()
    bb = model.backbone
    B = images.shape[0]
    attention = torch.zeros(B, N, dtype=torch.float64)
    for v, o in recorder.calls:
        g = o.grad.double()  # (B, h, T, d)
        # ||v_i - o_r|| for every row r and patch key i: (B, h, T, N)
        diff = (v.double()[:, :, None, 1:] - o.detach().double()[:, :, :,
                                                                  None])
        attention += (g.norm(dim=-1)[..., None] *
                      diff.norm(dim=-1)).sum(dim=(1, 2))
    n = torch.tensor(float(T), dtype=torch.float64, requires_grad=True)
    vit_layer_flops(n, C, FFN).backward()
    later = DEPTH - bb.prune_before[0]
    dense = bb.dense_flops(float(T))
    budget = model.budget_weight / B * (later * float(n.grad) + 5 * C) / \
        dense
    bound = (attention + budget).sum() / (4 * TAU)
    return float(bb.thresholds.grad.abs().max()), float(bound), recorder.gap


@pytest.mark.parametrize('seed', [0, 1])
def test_one_step_threshold_gradient_is_below_its_bound(seed, monkeypatch):
    # one location, so that no later score (itself a function of this gate
    # through the attention) feeds a second straight-through slope back
    model = _model((2, ), (0.6 / N, ), seed=seed)
    grad, bound, gap = _threshold_gradient_and_bound(model, monkeypatch)
    # the step is a trigger: some pruned key lies e^gap above its row
    assert gap > 8, gap
    assert 0 < grad <= bound * (1 + 1e-6), (grad, bound)
    # the paper's tangent reading (the code before the fix) on the same
    # step: the pruned keys' e^gap reaches the threshold
    paper = _model((2, ), (0.6 / N, ), policy_grad='tangent', seed=seed)
    monkeypatch.undo()
    grad, bound, _ = _threshold_gradient_and_bound(paper, monkeypatch)
    assert grad > 10 * bound, (grad, bound)


def _train(budget_weight, budget, policy_grad='secant', steps=12):
    model = _model((1, 2, 3), (0.2 / N, 0.3 / N, 0.4 / N), budget_weight,
                   policy_grad, budget=budget)
    optim = torch.optim.AdamW(model.parameters(), lr=2e-3,
                              weight_decay=0.)
    bb = model.backbone
    start = bb.thresholds.detach().clone()
    ratios = []
    for step in range(steps):
        images, samples = _batch(seed=step)
        losses = model.loss(images, samples)
        ratios.append(float(bb.analytic_flops().detach().mean() /
                            bb.dense_flops(float(T))))
        optim.zero_grad()
        sum(losses.values()).backward()
        optim.step()
    return bb.thresholds.detach() - start, ratios


@pytest.mark.parametrize('budget', [0.3, 0.6])
def test_budget_loss_drives_the_thresholds(budget):
    """The same 12 AdamW steps, with the budget loss off and at lambda1 = 2.
    The model starts at a FLOPs ratio of about 0.38: a budget of 0.3 asks
    for higher thresholds, 0.6 for lower ones. The paper's tangent reading
    (the code before the fix) fails both: its exploding classification
    gradient swamps the budget's (the thresholds move the wrong way under
    0.3, and by under 0.005 under 0.6)."""
    free, free_ratios = _train(0., budget)
    driven, ratios = _train(2., budget)
    assert free_ratios[0] == ratios[0]
    asked = 1. if ratios[0] > budget else -1.
    # Adam moves a parameter by about lr a step whatever its gradient's
    # size, so the budget must turn the thresholds, not merely add to their
    # gradient: at least five steps' worth of lr (2e-3) in total, its way
    assert asked * float((driven - free).sum()) > 5 * 2e-3, (driven, free)
    # and the model it trains runs closer to the budget
    assert abs(ratios[-1] - budget) < abs(free_ratios[-1] - budget)


# --- the operator ------------------------------------------------------------

PROPS = settings(max_examples=30, deadline=None, database=None,
                 derandomize=True)


def _attention_case(seed, B, h, T, d, spread):
    """float64 queries, keys and values whose logits spread over about
    ``spread`` units, a 0/1 policy keeping the class token and at least one
    other, and a random readout of the output."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    q, k = rnd(B, h, T, d) * spread**0.5, rnd(B, h, T, d) * spread**0.5
    v, readout = rnd(B, h, T, d), rnd(B, h, T, d)
    policy = (torch.rand(B, T, generator=g) < 0.5).double()
    policy[:, :2] = 1.
    return q, k, v, policy, readout


@PROPS
@given(seed=st.integers(0, 2**31 - 1), B=st.integers(1, 2),
       h=st.integers(1, 2), T=st.integers(3, 9), d=st.integers(1, 4),
       spread=st.sampled_from([1., 30.]))
def test_secant_gradient_is_the_readmission_difference(seed, B, h, T, d,
                                                       spread):
    """For a linear readout ``L = <r, o>`` and a pruned key ``j``
    (``p_j = 0``), the secant gradient ``dL/dp_j`` is exactly what setting
    ``p_j = 1`` changes: ``L(p + e_j) - L(p)`` (rows are independent given
    the policy). The forward and the gradients of ``q``, ``k``, ``v`` are
    the tangent reading's, to the bit."""
    q, k, v, policy, readout = _attention_case(seed, B, h, T, d, spread)

    def readout_of(p, policy_grad='secant', grad=False):
        p = p.clone().requires_grad_(grad)
        qkv = [t.clone().requires_grad_(grad) for t in (q, k, v)]
        ctx, attn = masked_attention(*qkv, d**-0.5, p, 'policy', eps=0.,
                                     policy_grad=policy_grad)
        loss = (ctx * readout).sum()
        if grad:
            loss.backward()
        return loss, ctx, p.grad, [t.grad for t in qkv]

    loss, ctx, grad, qkv_grads = readout_of(policy, grad=True)
    _, ctx_t, grad_t, qkv_grads_t = readout_of(policy, 'tangent', True)
    assert_equal(ctx, ctx_t)
    for a, b in zip(qkv_grads, qkv_grads_t):
        assert_equal(a, b)
    for b in range(B):
        for j in range(T):
            if policy[b, j] > 0:  # a kept key: the tangent, as the paper's
                assert_equal(grad[b, j], grad_t[b, j])
                continue
            opened = policy.clone()
            opened[b, j] = 1.
            diff = readout_of(opened)[0] - loss
            # float64 softmax rows of T terms, T-term readouts over h heads
            # and B images, values of magnitude |r| |v| <= the summed
            # |readout * ctx| of the larger of the two
            scale = float((readout.abs() * (v.abs().amax(-2, True))).sum())
            assert_rounding_close(grad[b, j], diff, 4 * T * d, scale)


def test_policy_gradient_factor_stays_finite_at_any_gap():
    """A pruned key 200 logits above its row's visible peak: ``exp`` would
    overflow float32; the forward is exact and the secant gradient is at
    most ``|r| |v_j - o|`` per row."""
    q = torch.tensor([[[[1.], [1.], [1.]]]])
    k = torch.tensor([[[[0.], [0.], [200.]]]])
    v = torch.tensor([[[[1.], [2.], [3.]]]])
    policy = torch.tensor([[1., 1., 0.]], requires_grad=True)
    ctx, attn = masked_attention(q, k, v, 1., policy, 'policy')
    # the hidden key gets only the stabiliser's share, eps / T / (Z + eps)
    assert torch.isfinite(ctx).all() and attn[0, 0, :2, 2].lt(1e-6).all()
    ctx.sum().backward()
    assert torch.isfinite(policy.grad).all()
    # rows 0 and 1 see keys 0 and 1 (weight 1/2 each, o = 1.5): readmitting
    # key 2 (v = 3) moves each row's output by at most 3 - 1.5
    assert 0 < float(policy.grad[0, 2]) <= 2 * 1.5
    paper = torch.tensor([[1., 1., 0.]], requires_grad=True)
    ctx_t, _ = masked_attention(q, k, v, 1., paper, 'policy',
                                policy_grad='tangent')
    assert_equal(ctx_t, ctx)
    ctx_t.sum().backward()
    assert float(paper.grad[0, 2]) > 1e30  # e^200 saturates at float max


def test_policy_grad_is_checked_at_build():
    with pytest.raises(ValueError, match='policy_grad'):
        _model((2, ), (0.5 / N, ), policy_grad='chord')


# --- batched inference -------------------------------------------------------


@PROPS
@given(seed=st.integers(0, 2**31 - 1), B=st.integers(2, 4),
       N=st.integers(1, 12), C=st.integers(1, 3))
def test_batch_mean_drop_equals_the_padded_path(seed, B, N, C):
    """``batch_mode='mean'`` on unpadded rows (top-k and gather) gives what
    the general path gives (the batch-mean keep mask, then gathering and
    padding): the same tokens, positions and counts, and no mask."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, 1 + N, C, generator=g)
    scores = torch.randperm(B * N, generator=g).view(B, N).float()
    keep = torch.rand(B, N, generator=g) < 0.5
    fast = pruning_layer.PruningState(x, 1, keep_pruned=True)
    out = fast.drop(x, keep, scores)
    slow = pruning_layer.PruningState(x, 1, keep_pruned=True)
    out_ref = slow.drop(x, batch_mean_keep_mask(scores, keep))
    assert_equal(out, out_ref)
    assert_equal(fast.index, slow.index)
    assert fast.key_mask is None and slow.key_mask is None
    assert fast.alive.all() and torch.equal(fast.count, slow.count)
    assert_equal(fast.full, slow.full)


def test_threshold_mask_is_exactly_zero_one():
    scores = torch.rand(3, 50, requires_grad=True)
    theta = torch.tensor(0.5, requires_grad=True)
    mask = threshold_keep_mask(scores, theta, tau=0.3)  # soft: not saturated
    assert set(mask.detach().unique().tolist()) <= {0., 1.}
    mask.sum().backward()
    assert theta.grad != 0
    with torch.no_grad():
        assert_equal(threshold_keep_mask(scores, theta, tau=0.3),
                     mask.detach())
