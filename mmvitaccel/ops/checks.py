"""One validator for a parameter that takes one of a fixed set of values."""

__all__ = ['check_choice']


def check_choice(name, value, choices):
    """Raise ``ValueError('unknown <name> <value!r>; choose from ...')``.

    Args:
        name (str): the parameter's name, e.g. ``'scorer'``.
        value: the value given.
        choices (Sequence): the allowed values.

    Returns:
        ``value``, unchanged.

    Raises:
        ValueError: ``value`` is not one of ``choices``.
    """
    if value not in choices:
        raise ValueError(f'unknown {name} {value!r}; choose from '
                         f'{tuple(choices)}')
    return value
