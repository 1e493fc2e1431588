"""Where a backward pass grows the gradient: per-operation and per-module
gradient magnitudes of one loss (``tools/analysis/grad_path.py``)."""
from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence

import torch
import torch.nn as nn

__all__ = ['BackwardStep', 'GradientTrace', 'amplifiers', 'trace_backward']


@dataclass
class BackwardStep:
    """One backward node as it ran.

    Attributes:
        order (int): its position in the backward pass (0 runs first).
        op (str): the node's name, e.g. ``'MulBackward0'``.
        source (str): the innermost forward frames in ``packages`` that made
            it, ``file:line in function``.
        grad_in (float): the largest ``|gradient|`` arriving at it.
        grad_out (float): the largest ``|gradient|`` it passes on.
    """
    order: int
    op: str
    source: str
    grad_in: float
    grad_out: float

    @property
    def gain(self):
        """``grad_out / grad_in`` (``inf`` when nothing arrived)."""
        return self.grad_out / self.grad_in if self.grad_in > 0 else \
            float('inf') if self.grad_out > 0 else 1.


@dataclass
class GradientTrace:
    """The result of :func:`trace_backward`.

    Attributes:
        steps (list[BackwardStep]): the graph's nodes in backward order.
        modules (dict[str, float]): module name -> the largest
            ``|gradient|`` of its output, in backward order.
        params (dict[str, float]): parameter name -> ``||grad||_2``.
    """
    steps: List[BackwardStep]
    modules: Dict[str, float]
    params: Dict[str, float]

    @property
    def total_norm(self):
        """``||grad||_2`` over all parameters (before clipping)."""
        return sum(v**2 for v in self.params.values())**0.5


def _largest(grads):
    return max((float(g.detach().abs().max()) for g in grads
                if g is not None and g.numel()), default=0.)


def _frames(node, packages):
    stack = node.metadata.get('traceback_', '')
    text = ''.join(stack) if isinstance(stack, (list, tuple)) else stack
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        line = line.strip()
        if line.startswith('File "') and any(p in line for p in packages):
            path, _, rest = line[6:].partition('", line ')
            number, _, func = rest.partition(', in ')
            found.append(f'{"/".join(path.split("/")[-3:])}:{number} in '
                         f'{func}')
    return ' <- '.join(reversed(found[-2:]))


def trace_backward(model: nn.Module,
                   loss_fn: Callable[[], torch.Tensor],
                   packages: Sequence[str] = ('mmvitaccel', 'mmpretrain',
                                              'mmcv', 'mmengine'),
                   ) -> GradientTrace:
    """One forward (under anomaly mode, so that each backward node knows
    its source line) and backward with gradient hooks on every node and
    every module output.

    Args:
        model (nn.Module): the watched model (its gradients are overwritten).
        loss_fn (callable): runs the forward and returns the scalar loss.
        packages (Sequence[str]): path parts of the frames ``source`` names.

    Returns:
        GradientTrace: the per-node, per-module and per-parameter records.
    """
    modules: Dict[str, float] = {}
    handles = []

    def watch(name):
        def hook(module, args, output):
            out = output[0] if isinstance(output, (tuple, list)) else output
            if torch.is_tensor(out) and out.requires_grad:
                out.register_hook(
                    lambda g: modules.__setitem__(name, _largest([g])))
        return hook

    for name, module in model.named_modules():
        if name:
            handles.append(module.register_forward_hook(watch(name)))
    model.zero_grad(set_to_none=True)
    try:
        with torch.autograd.set_detect_anomaly(True, check_nan=False):
            loss = loss_fn()
    finally:
        for h in handles:
            h.remove()
    steps: List[BackwardStep] = []
    seen, stack = set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)

        def hook(grad_inputs, grad_outputs, node=node):
            # grad_outputs arrive from the loss side, grad_inputs leave
            steps.append(BackwardStep(len(steps), node.name(),
                                      _frames(node, packages),
                                      _largest(grad_outputs),
                                      _largest(grad_inputs)))

        node.register_hook(hook)
        stack.extend(n for n, _ in node.next_functions)
    loss.backward()
    params = {n: float(p.grad.norm()) for n, p in model.named_parameters()
              if p.grad is not None}
    return GradientTrace(steps, modules, params)


def amplifiers(trace: GradientTrace, gain: float = 100.,
               floor: float = 1.) -> List[BackwardStep]:
    """The operations whose backward gain ``grad_out / grad_in`` is at
    least ``gain`` with ``grad_out > floor``, in backward order.

    Args:
        trace (GradientTrace): from :func:`trace_backward`.
        gain (float): the least ``grad_out / grad_in``.
        floor (float): the least ``grad_out`` (a gain on a vanishing
            gradient is harmless).

    Returns:
        list[BackwardStep]
    """
    return [s for s in trace.steps
            if s.gain >= gain and s.grad_out > floor]
