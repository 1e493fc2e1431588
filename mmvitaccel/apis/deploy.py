# Copyright (c) mmvitaccel contributors. All rights reserved.
"""Deployment: what a config's model computes (:class:`TensorModule`),
exported to ONNX or compiled, and compared with eager PyTorch
(``docs/deployment.md``)."""
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn

from mmvitaccel.apis.harness import toolbox_of
from mmvitaccel.apis.size_branches import check_dynamic_size
from mmvitaccel.apis.torch_version import DEPLOY_TORCH, require_torch

__all__ = [
    'TensorModule', 'deploy_module', 'python_scalars', 'check_exportable',
    'export_onnx', 'export_program', 'clear_shape_caches',
    'onnx_parity', 'onnx_op_profile', 'compile_parity', 'max_abs_diff', 'input_dims',
    'ONNX_TOLERANCE', 'EXPORTED_TOOLBOXES'
]

#: toolboxes whose models :class:`TensorModule` exports
EXPORTED_TOOLBOXES = ('mmpretrain', 'mmaction', 'mmdet', 'mmseg')

#: max |ONNX Runtime - PyTorch| of ``--check`` and the tests (float32)
ONNX_TOLERANCE = 1e-4


class TensorModule(nn.Module):
    """One tensor in, a tuple of tensors out: the deployed part of a model.

    Args:
        model (nn.Module): an mmpretrain classifier, mmaction2 recognizer,
            mmdet detector or mmseg segmentor (its ``extract_feat``).
        toolbox (str): one of :data:`EXPORTED_TOOLBOXES`.
    """

    def __init__(self, model: nn.Module, toolbox: str):
        super().__init__()
        if toolbox not in EXPORTED_TOOLBOXES:
            raise ValueError(f'export takes the models of '
                             f'{EXPORTED_TOOLBOXES}, got a {toolbox} model '
                             f'({type(model).__name__})')
        self.model = model
        self.toolbox = toolbox
        python_scalars(model)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """Args:
            x (Tensor): normalised images ``(B, 3, H, W)``, or clips
                ``(B, 3, T, H, W)`` (one view each).

        Returns:
            tuple[Tensor]: logits ``(B, num_classes)``, or feature maps.
        """
        if self.toolbox == 'mmpretrain':
            out = self.model(x, mode='tensor')
        elif self.toolbox == 'mmaction':
            # upstream's tensor mode stops at the backbone: run the head
            out, _ = self.model.extract_feat(x[:, None], stage='head')
        else:
            out = self.model.extract_feat(x)
        return tuple(out) if isinstance(out, (list, tuple)) else (out, )


def python_scalars(model: nn.Module) -> int:
    """Replace numpy scalars held as module attributes by Python numbers
    (Dynamo would make ``if drop_prob == 0.`` a data-dependent branch).

    Args:
        model (nn.Module): changed in place.

    Returns:
        int: how many attributes were replaced.
    """
    count = 0
    for module in model.modules():
        for name, value in list(vars(module).items()):
            if isinstance(value, np.generic):
                setattr(module, name, value.item())
                count += 1
    return count


def deploy_module(model: nn.Module,
                  cfg=None,
                  batch_size: int = 1) -> TensorModule:
    """The :class:`TensorModule` of a built model, in eval mode, after
    :func:`check_exportable`.

    Args:
        model (nn.Module): from :func:`mmvitaccel.apis.build_model`.
        cfg (mmengine.Config, optional): its config (for the toolbox).
        batch_size (int): the batch it will run at. Defaults to 1.
    """
    check_exportable(model, batch_size)
    return TensorModule(model, toolbox_of(model, cfg)).eval()


def check_exportable(model: nn.Module, batch_size: int = 1):
    """Refuse (``ValueError``, naming the option) test-time settings that no
    static graph holds: ``batch_mode='mean'`` token pruning at batch > 1.

    Args:
        model (nn.Module): the model.
        batch_size (int): the batch the graph is exported at.
    """
    for name, module in model.named_modules():
        if getattr(module, 'batch_mode', None) == 'mean' and \
                getattr(module, 'prunes', False) and \
                getattr(module, 'test_execution', None) == 'drop' and \
                batch_size > 1:
            raise ValueError(
                f'{name or "model"}: batch_mode=\'mean\' (batch-mean token '
                f'counts) cannot be exported at batch {batch_size}; set '
                f'model.backbone.batch_mode=\'pad\' (exact, padded) or '
                f'export at batch 1')


def clear_shape_caches():
    """Empty upstream caches of tensors by input shape (Video Swin's
    ``compute_mask``), which a ``torch.export`` capture fills with fakes."""
    import sys
    video_swin = sys.modules.get('mmaction.models.backbones.swin')
    if video_swin is not None:
        video_swin.compute_mask.cache_clear()


def export_program(module: nn.Module, x: torch.Tensor, **kwargs):
    """``torch.export.export(module, (x, ), strict=False, **kwargs)``,
    then :func:`clear_shape_caches` (also on failure)."""
    require_torch(DEPLOY_TORCH, 'Export for deployment')
    try:
        return torch.export.export(module, (x, ), strict=False, **kwargs)
    finally:
        clear_shape_caches()


#: range of a dynamic height or width: from 64, so that a stride-32 map keeps
#: 2 positions a side (a side of 1 is specialised as a broadcast)
DYNAMIC_SIZE_RANGE = (64, 4096)


def _dynamic_shapes(dynamic: bool, ndim: int = 4):
    if not dynamic:
        return None
    dim = torch.export.Dim
    low, high = DYNAMIC_SIZE_RANGE
    return ({ndim - 2: dim('height', min=low, max=high),
             ndim - 1: dim('width', min=low, max=high)}, )


def export_onnx(module: nn.Module,
                shape: Sequence[int],
                out: str,
                dynamic: bool = False,
                batch_size: int = 1,
                opset: Optional[int] = None) -> str:
    """Export ``module`` to an ONNX file with torch's Dynamo exporter.

    Args:
        module (nn.Module): e.g. a :class:`TensorModule`, in eval mode.
        shape (Sequence[int]): ``(H, W)`` of the example input
            (``(T, H, W)`` for video).
        out (str): the ``.onnx`` file to write.
        dynamic (bool): height and width dynamic, in
            :data:`DYNAMIC_SIZE_RANGE` (a model with a size branch is
            refused before the capture). Defaults to False.
        batch_size (int): batch of the example input. Defaults to 1.
        opset (int, optional): ONNX opset; the exporter's default if None.

    Returns:
        str: ``out``.
    """
    if dynamic:  # in milliseconds, before a capture that may not end
        check_dynamic_size(module)
    x = torch.randn(batch_size, 3, *shape)
    with torch.no_grad():
        try:
            program = export_program(
                module, x, dynamic_shapes=_dynamic_shapes(dynamic, x.dim()))
        except Exception as e:  # torch's constraint errors have no base
            if not dynamic or 'Constraints violated' not in str(e):
                raise
            guards = [line.strip() for line in str(e).splitlines()
                      if 'satisfy the generated guard' in line]
            raise ValueError(
                'dynamic height and width cannot be exported: the forward '
                'branches on the input size (' + '; '.join(guards[:4]) +
                '); export without --dynamic, one file per input size') \
                from e
        onnx_program = torch.onnx.export(
            program, (x, ),
            dynamo=True,
            opset_version=opset,
            input_names=['input'],
            external_data=False,
            verbose=False)
    onnx_program.save(out)
    return out


def input_dims(onnx_file: str) -> List:
    """The input dimensions of an ONNX file: ints, or names where
    dynamic."""
    import onnx
    model = onnx.load(onnx_file, load_external_data=False)
    shape = model.graph.input[0].type.tensor_type.shape
    return [d.dim_param if d.dim_param else d.dim_value for d in shape.dim]


def max_abs_diff(a: Sequence[torch.Tensor], b: Sequence) -> float:
    """Largest ``|a - b|`` over paired outputs (shapes must agree)."""
    if len(a) != len(b):
        raise ValueError(f'{len(a)} outputs against {len(b)}')
    diff = 0.
    for x, y in zip(a, b):
        y = torch.as_tensor(y)
        if tuple(x.shape) != tuple(y.shape):
            raise ValueError(f'output shapes differ: {tuple(x.shape)} and '
                             f'{tuple(y.shape)}')
        diff = max(diff, float((x.float() - y.float()).abs().max()))
    return diff


def onnx_parity(module: nn.Module,
                onnx_file: str,
                shapes: Sequence[Sequence[int]],
                batch_size: int = 1,
                seed: int = 0) -> List[Dict]:
    """Run ``onnx_file`` in onnxruntime (CPU) and ``module`` in PyTorch on
    the same random inputs.

    Args:
        module (nn.Module): the exported module.
        onnx_file (str): its ONNX file.
        shapes (Sequence[Sequence[int]]): ``(H, W)`` (video ``(T, H, W)``).
        batch_size (int): batch of the inputs. Defaults to 1.
        seed (int): seed of the inputs. Defaults to 0.

    Returns:
        list[dict]: per shape ``{'shape', 'max_abs_diff', 'max_abs_ref'
        (the scale of a rounding bound), 'outputs' (their shapes)}``.
    """
    import onnxruntime as ort
    session = ort.InferenceSession(onnx_file,
                                   providers=['CPUExecutionProvider'])
    name = session.get_inputs()[0].name
    g = torch.Generator().manual_seed(seed)
    results = []
    for shape in shapes:
        x = torch.randn(batch_size, 3, *shape, generator=g)
        with torch.no_grad():
            ref = module(x)
        got = session.run(None, {name: x.numpy()})
        results.append(dict(shape=tuple(shape),
                            max_abs_diff=max_abs_diff(ref, got),
                            max_abs_ref=max(float(r.abs().max())
                                            for r in ref),
                            outputs=[tuple(r.shape) for r in ref]))
    return results


def onnx_op_profile(onnx_file: str,
                    x: torch.Tensor,
                    runs: int = 3,
                    threads: Optional[int] = None) -> Dict:
    """Kernel time of onnxruntime by operator type: one untimed call, then
    ``runs`` calls under its profiler.

    Args:
        onnx_file (str): the exported graph.
        x (Tensor): its input.
        runs (int): profiled calls. Defaults to 3.
        threads (int, optional): intra-op threads (default: torch's).

    Returns:
        dict: ``{'seconds_per_call', 'ops': [(op_type, seconds, share)]}``,
        by falling kernel time (seconds over all ``runs``).
    """
    import json
    import os
    import tempfile
    import time

    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or torch.get_num_threads()
    options.inter_op_num_threads = 1
    with tempfile.TemporaryDirectory() as tmp:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tmp, 'profile')
        session = ort.InferenceSession(onnx_file, options,
                                       providers=['CPUExecutionProvider'])
        feed = {session.get_inputs()[0].name: x.cpu().numpy()}
        session.run(None, feed)
        start = time.perf_counter()
        for _ in range(runs):
            session.run(None, feed)
        per_call = (time.perf_counter() - start) / runs
        with open(session.end_profiling()) as f:
            events = json.load(f)
    totals = {}
    for event in events:  # the warm-up call is profiled too: left out below
        if event.get('cat') == 'Node' and \
                event['name'].endswith('_kernel_time'):
            op = event['args']['op_name']
            totals.setdefault(op, []).append(event['dur'])
    ops = {}
    for op, durations in totals.items():
        # each node runs once per call: drop the first (warm-up) share
        keep = durations[len(durations) // (runs + 1):]
        ops[op] = sum(keep) / 1e6
    whole = sum(ops.values()) or 1.
    return dict(seconds_per_call=per_call,
                ops=sorted(((op, t, t / whole) for op, t in ops.items()),
                           key=lambda r: -r[1]))


def capture_scalars():
    """Dynamo keeps ``Tensor.item()`` in the graph (a data-dependent size,
    as in ``torch.export``): the selectors' kept-token counts."""
    return torch._dynamo.config.patch(capture_scalar_outputs=True)


def compile_parity(module: nn.Module,
                   shapes: Sequence[Sequence[int]],
                   backend: str = 'inductor',
                   batch_size: int = 1,
                   seed: int = 0) -> List[Dict]:
    """``torch.compile(module, fullgraph=True)`` (a graph break is an error)
    against eager mode.

    Args:
        module (nn.Module): the module, in eval mode.
        shapes (Sequence[Sequence[int]]): ``(H, W)`` (video ``(T, H, W)``).
        backend (str): ``torch.compile`` backend; ``'aot_eager'`` traces the
            same graph without code generation. Defaults to ``'inductor'``.
        batch_size (int): batch of the inputs. Defaults to 1.
        seed (int): seed of the inputs. Defaults to 0.

    Returns:
        list[dict]: per shape ``{'shape', 'max_abs_diff'}``.
    """
    require_torch(DEPLOY_TORCH, 'torch.compile(fullgraph=True) deployment')
    torch.compiler.reset()  # no cached graphs, no recompile budget used
    # one static graph per shape, as deployed (no symbolic retrace)
    compiled = torch.compile(module, fullgraph=True, backend=backend,
                             dynamic=False)
    g = torch.Generator().manual_seed(seed)
    results = []
    for shape in shapes:
        x = torch.randn(batch_size, 3, *shape, generator=g)
        with torch.no_grad(), capture_scalars():
            ref = module(x)
            got = compiled(x)
        results.append(dict(shape=tuple(shape),
                            max_abs_diff=max_abs_diff(ref, got)))
    return results
