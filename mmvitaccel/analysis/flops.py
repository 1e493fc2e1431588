# Copyright (c) mmvitaccel contributors. All rights reserved.
"""One FLOP-counting convention for every model in mmvitaccel.

The convention, used by every number this project reports:

* FLOPs are counted by :class:`mmengine.analysis.FlopAnalyzer`, which traces
  the model with ``torch.jit`` and counts **one multiply-add as one FLOP**
  for matrix products and convolutions. Element-wise ops, activations,
  softmax, pooling with ``max`` etc. count zero; normalisation layers count
  what mmengine's handles say (``layer_norm``/``group_norm`` ``5 * numel``
  with affine parameters, eval ``batch_norm`` ``2 * numel``).
* The model runs in eval mode under ``torch.no_grad()`` (with gradients on
  torch < 2.2, see below).
* Handles are added for ops that mmengine 0.10.7 misses but that carry real
  matrix-multiply work on torch >= 2 (see :data:`EXTRA_FLOP_HANDLES`):
  ``aten::scaled_dot_product_attention`` (used by mmpretrain's attention),
  ``aten::baddbmm`` (``nn.MultiheadAttention`` with a mask), an exact,
  integer ``aten::einsum``, and 1-d/3-d adaptive average pooling counted
  like mmengine's 2-d one (video heads). The PyTorch fast path of
  ``nn.MultiheadAttention`` (``aten::_native_multi_head_attention``, taken in
  eval mode under ``no_grad``) is switched off while counting so that the
  projections and the attention are counted like the regular path; torch
  < 2.2 has no switch for it, so there the count runs with gradients on,
  which keeps the module off the fast path as well.
* For adaptive models whose token count depends on the content, the FLOPs of
  a model are the **mean over the given inputs** of the analyzer's total
  (:func:`average_flops`).

Ops that are neither counted nor known to be free are reported in
``FlopCount.unsupported_ops`` instead of being logged as warnings (mmcv
ops such as ``RoIAlign``/``NMS`` appear there as ``prim::PythonOp.*``).

Caveats of the jit-trace analyzer: work whose result is not returned is
dropped from the graph, so :func:`count_flops` returns every output tensor
(data samples included); mmengine's ``aten::matmul`` handle counts
``prod(a.shape) * b.shape[-1]``, which under-counts when ``a`` is the
broadcast operand (not the case in the attention of mmpretrain models).
"""
import contextlib
import typing
from collections import Counter
from functools import reduce
from operator import mul
from typing import (Any, Dict, Iterable, List, NamedTuple, Optional, Tuple,
                    Union)

import torch
import torch.nn as nn
from mmengine.analysis import FlopAnalyzer
from mmengine.analysis.jit_handles import (einsum_flop_jit,
                                           elementwise_flop_counter, get_shape)
from mmengine.structures import BaseDataElement

__all__ = [
    'EXTRA_FLOP_HANDLES', 'ZERO_FLOP_OPS', 'FlopCount', 'AverageFlopCount',
    'sdpa_flop_jit', 'baddbmm_flop_jit', 'einsum_exact_flop_jit',
    'build_flop_analyzer', 'count_flops', 'average_flops', 'count_params'
]


def _prod(xs: Iterable[int]) -> int:
    return int(reduce(mul, xs, 1))


def sdpa_flop_jit(inputs: List[Any], outputs: List[Any]) -> int:
    """FLOPs of ``aten::scaled_dot_product_attention``.

    Counts exactly what the analyzer counts for the explicit form
    ``softmax(q @ k.transpose(-2, -1) * scale) @ v``: two matmuls, the scaling,
    softmax, mask and dropout being free. With ``q: (*B, Lq, E)``,
    ``k: (*Bk, Lk, E)``, ``v: (*Bv, Lk, Ev)`` and output ``(*Bo, Lq, Ev)``::

        flops = prod(Bo) * Lq * Lk * E + prod(Bo) * Lq * Lk * Ev

    ``Bo`` is the broadcast batch shape (with ``enable_gqa`` the head count
    of ``q``), read from the traced output so that broadcasting and
    grouped-query attention are counted as if ``k``/``v`` were expanded.

    Args:
        inputs (list[torch._C.Value]): Jit inputs of the node
            ``(query, key, value, attn_mask, dropout_p, is_causal, scale,
            enable_gqa)``.
        outputs (list[torch._C.Value]): Jit outputs; ``outputs[0]`` is the
            attention result of shape ``(*Bo, Lq, Ev)``.

    Returns:
        int: The number of multiply-adds.
    """
    q_shape = get_shape(inputs[0])
    k_shape = get_shape(inputs[1])
    v_shape = get_shape(inputs[2])
    out_shape = get_shape(outputs[0])
    embed, len_k, embed_v = q_shape[-1], k_shape[-2], v_shape[-1]
    if out_shape is not None:
        batch_and_lq = _prod(out_shape[:-1])
    else:  # pragma: no cover - the tracer always records output shapes
        batch = torch.broadcast_shapes(torch.Size(q_shape[:-2]),
                                       torch.Size(k_shape[:-2]))
        batch_and_lq = _prod(batch) * q_shape[-2]
    return batch_and_lq * len_k * (embed + embed_v)


def baddbmm_flop_jit(inputs: List[Any], outputs: List[Any]) -> int:
    """FLOPs of ``aten::baddbmm(input, batch1, batch2)``, counted as the
    ``bmm`` of ``batch1: (B, N, K)`` and ``batch2: (B, K, M)``, i.e.
    ``B * N * K * M``; the addition of ``input`` is free.

    Args:
        inputs (list[torch._C.Value]): Jit inputs
            ``(input, batch1, batch2, beta, alpha)``.
        outputs (list[torch._C.Value]): Jit outputs (unused).

    Returns:
        int: The number of multiply-adds.
    """
    b, n, k = get_shape(inputs[1])
    m = get_shape(inputs[2])[-1]
    return b * n * k * m


def einsum_exact_flop_jit(inputs: List[Any], outputs: List[Any]) -> int:
    """FLOPs of ``aten::einsum`` with one or two operands: the product of the
    sizes of all distinct indices, which is the exact multiply-add count of
    the contraction (zero when no index is summed over) (mmengine's handle goes through ``np.einsum_path`` and
    returns a rounded float). Three or more operands fall back to mmengine.

    Args:
        inputs (list[torch._C.Value]): Jit inputs ``(equation, operands,
            path)``; ``operands`` is a ``prim::ListConstruct`` of tensors.
        outputs (list[torch._C.Value]): Jit outputs.

    Returns:
        int: The number of multiply-adds.
    """
    equation = inputs[0].toIValue().replace(' ', '')
    operands = list(inputs[1].node().inputs())
    lhs = equation.split('->')[0].split(',')
    if len(operands) > 2 or '...' in equation:
        return int(einsum_flop_jit(inputs, outputs))
    sizes: Dict[str, int] = {}
    for subscripts, operand in zip(lhs, operands):
        for letter, size in zip(subscripts, get_shape(operand)):
            sizes[letter] = size
    if '->' in equation:
        out = equation.split('->')[1]
    else:  # implicit output: the letters that appear once
        letters = ''.join(lhs)
        out = ''.join(c for c in sizes if letters.count(c) == 1)
    if set(sizes) <= set(out):
        # nothing is summed: a permutation or an elementwise product, free by
        # the convention (like aten::permute and aten::mul)
        return 0
    return _prod(sizes.values())


#: Handles added to / replacing mmengine's defaults.
EXTRA_FLOP_HANDLES = {
    'aten::scaled_dot_product_attention': sdpa_flop_jit,
    'aten::baddbmm': baddbmm_flop_jit,
    'aten::einsum': einsum_exact_flop_jit,
    # like mmengine's 'aten::adaptive_avg_pool2d': one per input element
    'aten::adaptive_avg_pool1d': elementwise_flop_counter(1, 0),
    'aten::adaptive_avg_pool3d': elementwise_flop_counter(1, 0),
}

#: Ops that are free by the convention (element-wise, activations, softmax,
#: reductions, comparisons, shape ops). They are set to ``None`` on the
#: analyzer so that they are not reported as unsupported.
ZERO_FLOP_OPS = (
    'aten::add', 'aten::add_', 'aten::sub', 'aten::sub_', 'aten::rsub',
    'aten::mul', 'aten::mul_', 'aten::div', 'aten::div_', 'aten::neg',
    'aten::pow', 'aten::sqrt', 'aten::rsqrt', 'aten::exp', 'aten::log',
    'aten::log2', 'aten::abs', 'aten::reciprocal', 'aten::sign', 'aten::erf',
    'aten::softmax', 'aten::log_softmax', 'aten::_softmax', 'aten::gelu',
    'aten::gelu_', 'aten::silu', 'aten::silu_', 'aten::sigmoid',
    'aten::sigmoid_', 'aten::tanh', 'aten::tanh_', 'aten::hardswish',
    'aten::hardswish_', 'aten::hardsigmoid', 'aten::leaky_relu',
    'aten::leaky_relu_', 'aten::elu', 'aten::clamp_min', 'aten::clamp_max',
    'aten::mean', 'aten::sum', 'aten::amax', 'aten::argmax', 'aten::topk',
    'aten::sort', 'aten::argsort', 'aten::max_pool2d', 'aten::max_pool3d',
    'aten::lt', 'aten::le', 'aten::ne', 'aten::logical_not',
    'aten::logical_and', 'aten::logical_or', 'aten::where',
    'aten::masked_fill_', 'aten::fill_', 'aten::zero_', 'aten::unflatten',
    'aten::expand_as', 'aten::repeat', 'aten::repeat_interleave', 'aten::pad',
    'aten::clone', 'aten::dropout_', 'aten::feature_dropout', 'aten::alias',
    'aten::linspace', 'aten::meshgrid', 'aten::scatter', 'aten::scatter_',
    'aten::index_select', 'aten::ones_like', 'aten::empty_like', 'aten::flip',
    'aten::lift_fresh', 'aten::cumsum', 'aten::sin', 'aten::cos', 'aten::exp_',
    'aten::min', 'aten::maximum', 'aten::minimum', 'aten::scalar_tensor',
    'aten::pixel_shuffle', 'aten::pixel_unshuffle', 'aten::_shape_as_tensor',
    'aten::resolve_conj', 'aten::resolve_neg', 'aten::numpy_T', 'aten::mT',
    'aten::movedim', 'aten::tensor_split', 'aten::as_strided',
    'aten::masked_select', 'aten::tile', 'aten::im2col')


class FlopCount(NamedTuple):
    """Result of :func:`count_flops`.

    Attributes:
        total (int): FLOPs (multiply-adds) of the whole forward.
        by_module (dict[str, int]): FLOPs per (sub)module name; ``''`` is the
            root module.
        by_operator (dict[str, int]): FLOPs per operator, e.g. ``linear``.
        unsupported_ops (dict[str, int]): Ops met in the trace that count
            zero without being known to be free, with their occurrences.
    """
    total: int
    by_module: Dict[str, int]
    by_operator: Dict[str, int]
    unsupported_ops: Dict[str, int]


class AverageFlopCount(NamedTuple):
    """Result of :func:`average_flops`.

    Attributes:
        mean (float): Mean over the inputs of the total FLOPs.
        per_input (list[int]): Total FLOPs of each input.
        by_module (dict[str, float]): Mean FLOPs per module name.
        unsupported_ops (dict[str, int]): Union of the unsupported ops seen,
            with occurrences summed over the inputs.
    """
    mean: float
    per_input: List[int]
    by_module: Dict[str, float]
    unsupported_ops: Dict[str, int]


Inputs = Union[torch.Tensor, Tuple[Any, ...]]


def _tensors_only(out: Any) -> Tuple[torch.Tensor, ...]:
    """Flatten nested outputs to a tuple of tensors.

    The tracer rejects outputs such as ``None`` or data samples, and drops
    the ops whose results are not returned, so the tensors inside
    OpenMMLab data elements (``predict`` mode results) are returned too,
    except ground truth (``gt_*``, ``ignored_*``), which does not depend on
    the inputs and which the tracer would reject.
    """
    if isinstance(out, torch.Tensor):
        return (out, )
    if isinstance(out, BaseDataElement):
        out = [
            v for k, v in out.items() if not k.startswith(('gt_', 'ignored_'))
        ]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return tuple(t for o in out for t in _tensors_only(o))
    return ()


@contextlib.contextmanager
def _counting_mode(model: nn.Module, forward_kwargs: Optional[dict]):
    """Eval mode, no_grad, MHA fast path off, and ``forward`` patched on the
    instance to take ``forward_kwargs`` and return only tensors; everything
    is restored on exit.

    torch < 2.2 has no switch for the fast path (``torch.backends.mha``),
    which ``nn.MultiheadAttention`` takes only while no gradient is
    recorded; there the count runs with gradients enabled instead of
    ``no_grad``, so the counted ops are the same.
    """
    was_training = model.training
    mha = getattr(torch.backends, 'mha', None)
    fastpath = mha.get_fastpath_enabled() if mha is not None else None
    had_own_forward = 'forward' in vars(model)
    orig_forward = model.forward
    kwargs = dict(forward_kwargs or {})

    def forward(*args):
        return _tensors_only(orig_forward(*args, **kwargs))

    model.eval()
    if mha is not None:
        mha.set_fastpath_enabled(False)
    model.forward = forward
    try:
        with torch.no_grad() if mha is not None else torch.enable_grad():
            yield
    finally:
        if had_own_forward:
            model.forward = orig_forward
        else:
            del model.forward
        if mha is not None:
            mha.set_fastpath_enabled(fastpath)
        model.train(was_training)


def build_flop_analyzer(model: nn.Module, inputs: Inputs) -> FlopAnalyzer:
    """An mmengine :class:`FlopAnalyzer` with this project's handles.

    The caller is responsible for eval mode / ``no_grad`` (prefer
    :func:`count_flops`, which does both).

    Args:
        model (nn.Module): The model to trace.
        inputs (Tensor | tuple): Positional inputs of ``model.forward``, e.g.
            an image batch of shape ``(B, 3, H, W)``.

    Returns:
        FlopAnalyzer: The analyzer, with mmengine's warnings switched off
        (unsupported ops are available from ``.unsupported_ops()``).
    """
    analyzer = FlopAnalyzer(model, inputs)
    analyzer.set_op_handle(**EXTRA_FLOP_HANDLES)
    analyzer.set_op_handle(**{op: None for op in ZERO_FLOP_OPS})
    analyzer.unsupported_ops_warnings(False)
    analyzer.uncalled_modules_warnings(False)
    analyzer.tracer_warnings('none')
    return analyzer


def count_flops(model: nn.Module,
                inputs: Inputs,
                forward_kwargs: Optional[dict] = None) -> FlopCount:
    """Count the FLOPs of one forward of ``model`` by the project convention.

    Args:
        model (nn.Module): The model; it is put in eval mode while counting
            and its training flag is restored afterwards.
        inputs (Tensor | tuple): Positional inputs of ``model.forward``: a
            tensor such as an image batch ``(B, 3, H, W)`` or a video batch
            ``(B, C, T, H, W)``, or a tuple of them.
        forward_kwargs (dict, optional): Extra keyword arguments for
            ``model.forward``, e.g. ``dict(data_samples=..., mode='tensor')``
            for an OpenMMLab model. They are constants of the trace.

    Returns:
        FlopCount: ``(total, by_module, by_operator, unsupported_ops)``.
        ``total`` covers the whole batch: feed ``B = 1`` for per-image FLOPs.
    """
    if isinstance(inputs, list):
        inputs = tuple(inputs)
    with _counting_mode(model, forward_kwargs):
        analyzer = build_flop_analyzer(model, inputs)
        total = analyzer.total()
        by_module = {k: int(v) for k, v in analyzer.by_module().items()}
        by_operator = {k: int(v) for k, v in analyzer.by_operator().items()}
        unsupported = dict(analyzer.unsupported_ops())
    return FlopCount(int(total), by_module, by_operator, unsupported)


def average_flops(model: nn.Module,
                  samples: Iterable[Union[Inputs, dict]],
                  forward_kwargs: Optional[dict] = None,
                  progress: bool = False) -> AverageFlopCount:
    """Mean FLOPs over several real inputs, for adaptive models whose token
    counts depend on the content.

    Args:
        model (nn.Module): The model.
        samples (Iterable): One forward's inputs per item: a tensor (e.g.
            ``(1, 3, H, W)``), a tuple of tensors, or a dict such as the output
            of an OpenMMLab data preprocessor, ``{'inputs': Tensor,
            'data_samples': [...]}``, whose ``'inputs'`` is positional and
            whose other keys are keyword arguments of ``model.forward``.
        forward_kwargs (dict, optional): Keyword arguments shared by every
            forward, e.g. ``dict(mode='tensor')``.
        progress (bool): Show a tqdm progress bar. Defaults to False.

    Returns:
        AverageFlopCount: ``(mean, per_input, by_module, unsupported_ops)``.
    """
    per_input: List[int] = []
    by_module: typing.Counter[str] = Counter()
    unsupported: typing.Counter[str] = Counter()
    if progress:
        from tqdm import tqdm
        samples = tqdm(samples, desc='counting FLOPs', unit='input')
    for sample in samples:
        kwargs = dict(forward_kwargs or {})
        if isinstance(sample, dict):
            sample = dict(sample)
            inputs = sample.pop('inputs')
            kwargs.update(sample)
        else:
            inputs = sample
        result = count_flops(model, inputs, kwargs)
        per_input.append(result.total)
        by_module.update(result.by_module)
        unsupported.update(result.unsupported_ops)
    if not per_input:
        raise ValueError('average_flops() needs at least one input')
    n = len(per_input)
    return AverageFlopCount(
        sum(per_input) / n, per_input, {
            k: v / n
            for k, v in by_module.items()
        }, dict(unsupported))


def count_params(module: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters of a module, shared parameters counted once.

    Args:
        module (nn.Module): The module.
        trainable_only (bool): Count only parameters with
            ``requires_grad=True``. Defaults to False.

    Returns:
        int: The number of parameter elements.
    """
    return sum(p.numel() for p in module.parameters()
               if p.requires_grad or not trainable_only)
