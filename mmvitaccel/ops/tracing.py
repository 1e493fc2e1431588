"""Whether a graph is being captured for deployment (export or compile).

Some shortcuts of the eager code read tensor values on the host, e.g.
"is every key valid? then skip the mask". ``torch.export`` (and so the ONNX
exporter) and ``torch.compile(fullgraph=True)`` cannot branch on values, so
while they capture the forward the code takes the general branch, which
gives the same result for every input (an all-valid mask adds zeros to the
logits).

The TorchScript tracer is not counted as a capture: mmengine's FLOP counter
traces with it and must count what runs on its input, shortcuts included.

Plain torch: no registry, no OpenMMLab imports.
"""
import torch

__all__ = ['is_capturing']


def is_capturing():
    """True while ``torch.export``/``torch.onnx.export(dynamo=True)`` or
    ``torch.compile`` (Dynamo) record the running code.

    Returns:
        bool: whether value-dependent shortcuts must be skipped.
    """
    is_compiling = getattr(torch.compiler, 'is_compiling', None)
    if is_compiling is None:  # torch < 2.3: Dynamo's own, the same answer
        from torch import _dynamo
        is_compiling = _dynamo.is_compiling
    return bool(is_compiling())
