# Copyright (c) mmvitaccel contributors. All rights reserved.
"""One FLOP-counting convention for every model in mmvitaccel: mmengine's
``FlopAnalyzer`` (one multiply-add is one FLOP) with the handles below, in
eval mode, averaged over inputs for adaptive models (``docs/benchmarks.md``).
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
    """FLOPs of ``aten::scaled_dot_product_attention``, as for the explicit
    ``softmax(q k^T * scale) v`` (two matmuls; the rest free)::

        flops = prod(Bo) * Lq * Lk * (E + Ev)

    with ``q (*B, Lq, E)``, ``k (*Bk, Lk, E)``, ``v (*Bv, Lk, Ev)`` and the
    output's broadcast batch ``Bo`` (GQA counted as if expanded).

    Args:
        inputs (list[torch._C.Value]): Jit inputs ``(query, key, value,
            attn_mask, dropout_p, is_causal, scale, enable_gqa)``.
        outputs (list[torch._C.Value]): Jit outputs, ``(*Bo, Lq, Ev)``.

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
    """FLOPs of ``aten::baddbmm(input, batch1, batch2)``: the ``bmm`` of
    ``(B, N, K)`` and ``(B, K, M)``, ``B * N * K * M``; the add is free.

    Args:
        inputs (list[torch._C.Value]): ``(input, batch1, batch2, ...)``.
        outputs (list[torch._C.Value]): Jit outputs (unused).

    Returns:
        int: The number of multiply-adds.
    """
    b, n, k = get_shape(inputs[1])
    m = get_shape(inputs[2])[-1]
    return b * n * k * m


def einsum_exact_flop_jit(inputs: List[Any], outputs: List[Any]) -> int:
    """Exact FLOPs of ``aten::einsum`` with one or two operands: the product
    of all index sizes (0 when nothing is summed); more operands: mmengine's.

    Args:
        inputs (list[torch._C.Value]): ``(equation, operands, path)``.
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
        # nothing summed (a permutation or an elementwise product): free
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

#: Ops free by the convention (element-wise, softmax, reductions, shape ops),
#: set to ``None`` so that they are not reported as unsupported.
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
    'aten::masked_select', 'aten::tile', 'aten::im2col',
    'aten::linalg_vector_norm', 'aten::scatter_add')


class FlopCount(NamedTuple):
    """Result of :func:`count_flops`.

    Attributes:
        total (int): FLOPs (multiply-adds) of the whole forward.
        by_module (dict[str, int]): FLOPs per module name (``''``: root).
        by_operator (dict[str, int]): FLOPs per operator, e.g. ``linear``.
        unsupported_ops (dict[str, int]): ops counted zero without being
            known to be free, with their occurrences.
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
        unsupported_ops (dict[str, int]): their union, occurrences summed.
    """
    mean: float
    per_input: List[int]
    by_module: Dict[str, float]
    unsupported_ops: Dict[str, int]


Inputs = Union[torch.Tensor, Tuple[Any, ...]]


def _tensors_only(out: Any) -> Tuple[torch.Tensor, ...]:
    """Nested outputs as a tuple of tensors, data elements' included but
    ground truth (the tracer drops what is not returned)."""
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
    """Eval mode, ``no_grad`` (torch < 2.2: grad), MHA fast path off, and
    ``forward`` returning tensors only; all restored on exit."""
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
    """An mmengine :class:`FlopAnalyzer` with this project's handles and
    no warnings (eval mode and ``no_grad`` are the caller's: prefer
    :func:`count_flops`).

    Args:
        model (nn.Module): The model to trace.
        inputs (Tensor | tuple): Positional inputs of ``model.forward``.

    Returns:
        FlopAnalyzer: The analyzer (``.unsupported_ops()`` lists the rest).
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
        model (nn.Module): The model (training flag restored afterwards).
        inputs (Tensor | tuple): Positional inputs of ``model.forward``, e.g.
            ``(B, 3, H, W)`` or ``(B, C, T, H, W)``.
        forward_kwargs (dict, optional): Extra keyword arguments of
            ``model.forward`` (constants of the trace), e.g. ``mode='tensor'``.

    Returns:
        FlopCount: ``total`` covers the whole batch (``B = 1``: per image).
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
    """Mean FLOPs over several real inputs (token counts that depend on the
    content).

    Args:
        model (nn.Module): The model.
        samples (Iterable): One forward's inputs per item: a tensor, a tuple
            of tensors, or a data preprocessor's dict (``'inputs'``
            positional, the other keys keyword arguments).
        forward_kwargs (dict, optional): Keyword arguments of every forward.
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
    """Number of parameter elements of a module, shared ones counted once.

    Args:
        module (nn.Module): The module.
        trainable_only (bool): Count only ``requires_grad`` parameters.
    """
    return sum(p.numel() for p in module.parameters()
               if p.requires_grad or not trainable_only)
