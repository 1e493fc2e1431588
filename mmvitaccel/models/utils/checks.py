"""Build-time checks whose messages name the parameter, value and range."""
import math
from numbers import Integral, Real

__all__ = [
    'check_int', 'check_int_pair', 'check_finite', 'check_in_channels',
    'as_int_tuple'
]


def _is_int(value):
    return isinstance(value, Integral) and not isinstance(value, bool)


def check_int(name, value, low=None, high=None, hint=''):
    """``value`` as an ``int`` in ``low .. high`` (inclusive).

    Args:
        name (str): the parameter, for the message.
        value: what was given.
        low (int, optional): smallest allowed value.
        high (int, optional): largest allowed value.
        hint (str): why the range is what it is, appended to the message.

    Raises:
        TypeError: not an integer (a float, a bool, a string ...).
        ValueError: out of range.
    """
    allowed = f'an int in {"" if low is None else low}..' \
              f'{"" if high is None else high}'
    suffix = f' ({hint})' if hint else ''
    if not _is_int(value):
        raise TypeError(f'{name} must be {allowed}{suffix}, got {value!r} '
                        f'({type(value).__name__})')
    if (low is not None and value < low) or (high is not None
                                             and value > high):
        raise ValueError(f'{name} must be {allowed}{suffix}, got {value}')
    return int(value)


def check_int_pair(name, value, low=None, example=None, hint=''):
    """``value`` as a pair of ints, each ``>= low``.

    Args:
        name (str): the parameter, for the message.
        value: a list or tuple of two ints.
        low (int, optional): smallest allowed element.
        example (tuple[int, int], optional): a valid value for the message.
        hint (str): what the two elements are, appended to the message.

    Raises:
        TypeError: not a list/tuple of ints.
        ValueError: not two, or an element below ``low``.
    """
    form = 'a pair of ints' + ('' if low is None else f' >= {low}')
    form += '' if example is None else f', e.g. {tuple(example)}'
    suffix = f' ({hint})' if hint else ''
    if not isinstance(value, (list, tuple)) or \
            not all(_is_int(v) for v in value):
        raise TypeError(f'{name} must be {form}{suffix}, got {value!r}')
    if len(value) != 2 or (low is not None and min(value) < low):
        raise ValueError(f'{name} must be {form}{suffix}, got {value!r}')
    return tuple(int(v) for v in value)


def as_int_tuple(name, value):
    """A sequence of ints, or one int read as a sequence of one.

    Args:
        name (str): the parameter, for the message.
        value (int | Sequence[int]): what was given.
    """
    if _is_int(value):
        return (int(value), )
    if not isinstance(value, (list, tuple)) or \
            not all(_is_int(v) for v in value):
        raise TypeError(f'{name} must be an int or a list/tuple of ints, '
                        f'got {value!r}')
    return tuple(int(v) for v in value)


def check_finite(name, values):
    """The values as floats; a ``ValueError`` naming ``name`` unless finite.

    Args:
        name (str): the parameter, for the message.
        values (Iterable[float] | Tensor): a tensor is read on the host.
    """
    if hasattr(values, 'detach'):  # a tensor
        values = values.detach().cpu().flatten().tolist()
    out = []
    for v in values:
        if not isinstance(v, Real) or isinstance(v, bool):
            raise TypeError(f'{name} must be finite numbers, got {v!r}')
        out.append(float(v))
    bad = [v for v in out if not math.isfinite(v)]
    if bad:
        raise ValueError(f'{name} must be finite numbers, got {tuple(out)}')
    return tuple(out)


def check_in_channels(images, in_channels, ndim=None):
    """Refuse ``images`` without ``in_channels`` channels (dimension 1).

    Args:
        images (Tensor): ``(B, C, ...)`` input of a backbone.
        in_channels (int): the channels the backbone was built for.
        ndim (int, optional): 4 for ``(B, C, H, W)``, 5 with time.
    """
    shape = tuple(images.shape)
    rest = {4: 'H, W', 5: 'T, H, W'}.get(ndim, '...')
    expected = f'(B, {in_channels}, {rest})'
    if (ndim is not None and len(shape) != ndim) or len(shape) < 2:
        raise ValueError(f'expected an input {expected} (in_channels='
                         f'{in_channels}), got shape {shape}')
    if shape[1] != in_channels:
        raise ValueError(f'the backbone was built with in_channels='
                         f'{in_channels} and takes inputs {expected}, got '
                         f'shape {shape} with {shape[1]} at dimension 1 '
                         f'(channels); build it with in_channels='
                         f'{shape[1]} or convert the input')
