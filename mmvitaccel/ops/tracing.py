"""Whether a graph is being captured (export or compile), so that eager
shortcuts that read tensor values take the general branch instead.
"""
import torch

__all__ = ['is_capturing']


def is_capturing():
    """True while ``torch.export`` or ``torch.compile`` (Dynamo) records;
    the TorchScript tracer (the FLOP counter) does not count."""
    is_compiling = getattr(torch.compiler, 'is_compiling', None)
    if is_compiling is None:  # torch < 2.3: Dynamo's own, the same answer
        from torch import _dynamo
        is_compiling = _dynamo.is_compiling
    return bool(is_compiling())
