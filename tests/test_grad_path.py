"""``mmvitaccel.analysis.grad_path`` and ``tools/analysis/grad_path.py``:
the per-operation gradient gains of one backward pass find the operation
that multiplies the gradient, name its source line, and the tool runs on
the study's AS-ViT config."""
import os.path as osp
import sys

import pytest
import torch
import torch.nn as nn

from mmvitaccel.analysis.grad_path import amplifiers, trace_backward

from .utils import REPO


class _Amplifying(nn.Module):
    """A linear layer, then an operation whose backward multiplies the
    gradient by 1e4."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, x):
        return (self.linear(x) * 1e4).sum()


def test_the_amplifying_operation_is_found_with_its_source():
    model = _Amplifying()
    x = torch.randn(2, 3)
    trace = trace_backward(model, lambda: model(x), packages=('tests', ))
    found = amplifiers(trace, gain=100., floor=1.)
    assert [s.op for s in found] == ['MulBackward0']
    step = found[0]
    assert step.gain == pytest.approx(1e4)
    assert 'test_grad_path.py' in step.source and 'forward' in step.source
    # every operation of the graph ran once, in backward order
    assert [s.order for s in trace.steps] == list(range(len(trace.steps)))
    assert set(trace.params) == {'linear.weight', 'linear.bias'}
    assert trace.total_norm == pytest.approx(float(torch.cat(
        [p.grad.flatten() for p in model.parameters()]).norm()))
    assert trace.modules['linear'] == pytest.approx(1e4)
    # a gain on a vanishing gradient is not listed
    assert amplifiers(trace, gain=100., floor=1e5) == []


def test_the_tool_traces_the_studys_asvit(capsys):
    """The study's AS-ViT (random weights, a small batch): the tool prints
    the losses, the norm, the module gradients and the operations it
    lists, each with the gain and the gradient it was asked for. (Random
    weights hold no large logit gaps: the explosion itself is
    test_asvit_training's.)"""
    sys.path.insert(0, osp.join(REPO, 'tools', 'analysis'))
    try:
        import grad_path
    finally:
        sys.path.pop(0)
    trace, found = grad_path.main([
        osp.join(REPO, 'configs', 'study', 'asvit_digits.py'),
        '--cfg-options', 'train_dataloader.batch_size=4',
        'train_dataloader.dataset.max_samples=8',
        'model.teacher.checkpoint=None', '--modules'])
    out = capsys.readouterr().out
    assert 'parameter gradient norm' in out and 'loss_budget' in out
    assert 'backbone.thresholds' in trace.params
    assert f'of {len(trace.steps)}, in backward order' in out
    assert all(s.gain >= 100 and s.grad_out > 1 and s.source for s in found)
    assert 'backbone.layers.11' in out
