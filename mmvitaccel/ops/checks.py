"""One validator for a parameter that takes one of a fixed set of values.

Every method's option checks (``'unknown scorer ...'``, ``'unknown pooling
...'``, ``'unknown static attention init ...'``) go through
:func:`check_choice`, so they all read the same way: the parameter's name,
the value given and the allowed values.

Plain torch: no registry, no OpenMMLab imports.
"""

__all__ = ['check_choice']


def check_choice(name, value, choices):
    """Raise a clear ``ValueError`` when ``value`` is not in ``choices``.

    The message is ``unknown <name> <value!r>; choose from <choices>``.

    Args:
        name (str): The parameter's name, as the user writes it or as the
            docs describe it (e.g. ``'scorer'``, ``'static attention
            init'``).
        value: The value given.
        choices (Sequence): The allowed values.

    Returns:
        The ``value``, unchanged, so that a caller may write
        ``self.mode = check_choice('mode', mode, MODES)``.

    Raises:
        ValueError: ``value`` is not one of ``choices``.
    """
    if value not in choices:
        raise ValueError(f'unknown {name} {value!r}; choose from '
                         f'{tuple(choices)}')
    return value
