"""Registered datasets of real images that ship inside a package (no
download), for the small-scale accuracy study (``docs/study.md``).

This package imports nothing of mmvitaccel but :mod:`mmvitaccel.registry`.
"""
from .digits_canvas import (DigitsCanvas, EpochSampler, digits_splits,
                            render_canvas)

__all__ = ['DigitsCanvas', 'EpochSampler', 'digits_splits', 'render_canvas']
