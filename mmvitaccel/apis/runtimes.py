"""Deployed runtimes for timing (``tools/analysis/benchmark.py --runtime``):
eager, compiled, or ONNX in onnxruntime."""
from typing import Optional

import torch
import torch.nn as nn

from mmvitaccel.apis.deploy import (capture_scalars, export_program,
                                    python_scalars)
from mmvitaccel.apis.torch_version import DEPLOY_TORCH, require_torch

__all__ = ['RUNTIMES', 'runtime_callable']


#: runtimes of :func:`runtime_callable`
RUNTIMES = ('eager', 'compile', 'onnxruntime')


def runtime_callable(module: nn.Module,
                     x: torch.Tensor,
                     runtime: str = 'eager',
                     onnx_file: Optional[str] = None,
                     threads: Optional[int] = None):
    """A call of ``module(x)`` in a deployed runtime, for timing.

    Args:
        module (nn.Module): in eval mode (``'compile'`` turns its numpy
            scalars into Python numbers, in place).
        x (Tensor): the input, fixed (graphs are static in its shape).
        runtime (str): ``'eager'``; ``'compile'`` (``fullgraph=True,
            dynamic=False``, inductor); ``'onnxruntime'`` (on the CPU).
        onnx_file (str, optional): where to export for ``'onnxruntime'``.
        threads (int, optional): onnxruntime's intra-op threads (default:
            torch's).

    Returns:
        Callable[[], Any]: runs one batch.
    """
    from mmvitaccel.ops import check_choice
    check_choice('runtime', runtime, RUNTIMES)
    if runtime != 'eager':
        require_torch(DEPLOY_TORCH, f'The {runtime} runtime')
    if runtime == 'eager':
        fn = module
    elif runtime == 'compile':
        # numpy drop-path rates would break the graph (see python_scalars)
        python_scalars(module)
        fn = torch.compile(module, fullgraph=True, dynamic=False)
    else:
        import onnxruntime as ort
        if onnx_file is None:
            raise ValueError("runtime='onnxruntime' needs onnx_file")
        program = export_program(module, x)
        torch.onnx.export(program, (x, ), dynamo=True,
                          external_data=False).save(onnx_file)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or torch.get_num_threads()
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(onnx_file, options,
                                       providers=['CPUExecutionProvider'])
        feed = {session.get_inputs()[0].name: x.cpu().numpy()}
        return lambda: session.run(None, feed)

    def run():
        with torch.no_grad(), capture_scalars():
            return fn(x)

    return run
