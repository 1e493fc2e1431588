"""Float tolerances derived from the arithmetic, not from what passed on one CPU.

Two computations of the same real quantity that differ only in rounding
(another summation order, another blocking, another kernel: a different CPU,
``ATEN_CPU_CAPABILITY``, a checkpointed recompute, a batched form of a loop)
differ by a bounded amount. For a sum of ``n`` terms in a precision with unit
roundoff ``u = eps / 2`` (Higham, *Accuracy and Stability of Numerical
Algorithms*, eq. 3.5)::

    |fl(s) - s| <= gamma_n * S,   gamma_n = n u / (1 - n u),   S = sum |x_i|

so two orders of it differ by at most ``2 gamma_n S``. A network composes such
sums; to first order their errors add, so ``terms`` is the accumulation length
summed along the longest chain of dependent sums (for a stack of linear layers,
the sum of their input widths; for a weight gradient, also the number of
positions reduced over), and ``scale`` bounds ``S`` at the output: the largest
magnitude the compared values, or the intermediates they are made from, reach.

Where the two paths run the same kernels on the same data, the result is
bit-exact: compare with :func:`assert_equal`, not with a tolerance.
"""
from contextlib import contextmanager

import torch
import torch.nn as nn


def rounding_tol(dtype, terms, scale=1.0):
    """The largest difference rounding alone can make, ``2 gamma_n scale``.

    Args:
        dtype (torch.dtype): the floating dtype the sums run in.
        terms (int): ``n``, the accumulation length along the longest chain
            of dependent sums (see the module docstring).
        scale (float): bound of ``sum |x_i|`` at the compared values.

    Returns:
        float: the tolerance.
    """
    u = torch.finfo(dtype).eps / 2
    nu = terms * u
    if nu >= 0.1:
        raise ValueError(f'terms={terms} is too long an accumulation for '
                         f'{dtype}: n u = {nu:.2g}; compare in float64')
    return 2 * nu / (1 - nu) * scale


def assert_rounding_close(actual, expected, terms, scale=None, msg=''):
    """``max |actual - expected| <= rounding_tol(dtype, terms, scale)``.

    Args:
        actual, expected (Tensor): same shape and dtype.
        terms (int): accumulation length (see :func:`rounding_tol`).
        scale (float, optional): bound of the summed magnitudes; default the
            largest ``|expected|`` (at least 1, so that values near zero,
            where cancellation leaves only rounding, are not held to a
            relative bound).
        msg (str): prefix of the failure message.
    """
    assert actual.shape == expected.shape, (msg, actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (msg, actual.dtype, expected.dtype)
    if scale is None:
        scale = max(1.0, float(expected.abs().max())) if expected.numel() \
            else 1.0
    tol = rounding_tol(expected.dtype, terms, scale)
    diff = float((actual.double() - expected.double()).abs().max()) \
        if expected.numel() else 0.0
    assert diff <= tol, (f'{msg} max |diff| {diff:.3g} > {tol:.3g} '
                         f'(n={terms}, scale={scale:.3g}, {expected.dtype})')


def assert_equal(actual, expected, msg=''):
    """Bit-exact equality (same path, same kernels): values, shape, dtype."""
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, msg=msg
                               or None, equal_nan=True)


def attention_tol(q, k, v, scale, terms=0):
    """Rounding bound of ``softmax(q k^T scale) v`` computed two ways.

    A logit is a sum of ``d`` products (error ``gamma_d S_l``, ``S_l =
    scale |q| |k|^T``); the softmax turns logit errors into relative errors
    of the probabilities, doubled by the shift by the row's maximum, and
    adds ``gamma_T`` for the row sum and a few roundings; the product with
    ``v`` adds ``gamma_T``. Per side ``|error| <= max(1, max|v|) (1 + S_l)
    gamma_n``, ``n = 2 d + 2 T + 6`` (``+ terms``: sums made of the
    probabilities and the context, e.g. scores); two sides:
    :func:`rounding_tol`.

    Args:
        q (Tensor): ``(..., Lq, d)``.
        k, v (Tensor): ``(..., T, d)``.
        scale (float): the logits' factor.
        terms (int): further accumulation length after the attention.
    """
    d, T = q.shape[-1], k.shape[-2]
    s_l = float(((q.abs() * scale) @ k.abs().transpose(-2, -1)).max())
    return rounding_tol(q.dtype, 2 * d + 2 * T + 6 + terms,
                        max(1., float(v.abs().max())) * (1 + s_l))


@contextmanager
def summed_magnitude(model):
    """``S`` of Higham's bound for the forwards of ``model`` run inside:
    yields a list whose ``max`` is, after them, a bound of the sums of
    ``|terms|`` of their products and LayerNorms (``max|x| max_i sum_j
    |W_ij| + max|b|``; ``(|x| + |mu|) |gamma| / sigma + |beta|``), and at
    least the largest activation and 1 (read by hooks; the weights are
    seeded, the same on any CPU)."""
    found = [1.]

    def linear(m, args, out):
        bias = 0. if m.bias is None else float(m.bias.abs().max())
        found.append(
            float(args[0].abs().max()) *
            float(m.weight.abs().sum(1).max()) + bias)
        found.append(float(out.abs().max()))

    def norm(m, args, out):
        x = args[0]
        mu = x.mean(-1, keepdim=True)
        sigma = (x.var(-1, unbiased=False, keepdim=True) + m.eps).sqrt()
        found.append(float(((x.abs() + mu.abs()) / sigma * m.weight.abs() +
                            m.bias.abs()).max()))

    hooks = [
        m.register_forward_hook(linear if isinstance(m, nn.Linear) else norm)
        for m in model.modules() if isinstance(m, (nn.Linear, nn.LayerNorm))
    ]
    try:
        yield found
    finally:
        for h in hooks:
            h.remove()
