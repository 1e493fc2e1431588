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
import torch


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
