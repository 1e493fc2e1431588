"""Eager-inference shortcuts built from weights, cached until a weight
changes (``docs/architecture.md``, "ops/inference_cache.py").
"""
import torch

from mmvitaccel.ops.tracing import is_capturing

__all__ = ['eager_inference', 'weight_cache']


def eager_inference():
    """True when an inference-only shortcut may run: no gradients, no
    TorchScript tracing, no graph capture."""
    return not (torch.is_grad_enabled() or torch.jit.is_tracing()
                or is_capturing())


def weight_cache(owner, name, weights, build, extra=()):
    """``build()``, kept in ``owner.__dict__[name]`` until a weight changes.

    Args:
        owner (nn.Module): Holds the cache (outside ``state_dict``).
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
