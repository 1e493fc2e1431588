"""Whether a graph is being captured (export, compile or tracing).

Some shortcuts of the eager code read tensor values on the host, e.g.
"is every key valid? then skip the mask". A graph capture cannot branch on
values (``torch.export`` and ``torch.compile(fullgraph=True)`` fail, the
TorchScript tracer bakes in the branch taken on the example input), so under
capture the code takes the general branch, which gives the same result for
every input (an all-valid mask adds zeros to the logits).

Plain torch: no registry, no OpenMMLab imports.
"""
import torch

__all__ = ['is_capturing']


def is_capturing():
    """True while ``torch.export``/``torch.onnx.export``, ``torch.compile``
    (Dynamo) or the TorchScript tracer record the running code.

    Returns:
        bool: whether value-dependent shortcuts must be skipped.
    """
    return bool(torch.compiler.is_compiling() or torch.jit.is_tracing()
                or torch.onnx.is_in_onnx_export())
