"""Eager-inference shortcuts built from weights, kept between calls.

Some layers run faster in inference from a tensor derived from their
weights (a stacked projection, a sparse filter operator). The derived
tensor is kept on the module and rebuilt when a weight changes: its
storage (a checkpoint loaded with ``assign``, ``.to()``) or its in-place
version counter (``load_state_dict``, an optimiser step).

The shortcuts run only in eager inference: with gradients on, the layers
take the path that trains; the TorchScript tracer (mmengine's FLOP
counter) and graph capture (export, compile) record the general path.

Plain torch: no registry, no OpenMMLab imports.
"""
import torch

from mmvitaccel.ops.tracing import is_capturing

__all__ = ['eager_inference', 'weight_cache']


def eager_inference():
    """True when an inference-only shortcut may run: gradients off, no
    TorchScript tracing, no graph capture.

    Returns:
        bool
    """
    return not (torch.is_grad_enabled() or torch.jit.is_tracing()
                or is_capturing())


def weight_cache(owner, name, weights, build, extra=()):
    """``build()``, kept in ``owner.__dict__[name]`` until a weight changes.

    Args:
        owner (nn.Module): Holds the cache (outside ``state_dict`` and
            ``parameters``, so checkpoints and optimisers never see it).
        name (str): Attribute name of the cache.
        weights (Sequence[Tensor]): The tensors the result is derived from.
        build (callable): ``build() -> object``.
        extra (tuple): Further hashable parts of the key (shape, dtype).

    Returns:
        object: what ``build`` returned for the current weights.
    """
    key = tuple((t.data_ptr(), t._version, t.dtype) for t in weights) + \
        tuple(extra)
    cache = owner.__dict__.get(name)
    if cache is None or cache[0] != key:
        cache = owner.__dict__[name] = (key, build())
    return cache[1]
