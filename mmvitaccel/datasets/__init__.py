"""Registered datasets of real images that ship inside a package (no
download), for the small-scale accuracy study (``docs/study.md``).

This package imports nothing of mmvitaccel but :mod:`mmvitaccel.registry`.
"""
from .digits_canvas import (DigitsCanvas, EpochSampler, digits_splits,
                            render_canvas)
from .digits_clips import CLIP_LABELS, DigitsClips, render_clip
from .digits_scenes import (DigitsInstances, DigitsScenes,
                            DigitsSegmentation, render_scene)

__all__ = [
    'CLIP_LABELS', 'DigitsClips', 'render_clip', 'DigitsCanvas', 'DigitsInstances', 'DigitsScenes', 'DigitsSegmentation',
    'EpochSampler', 'digits_splits', 'render_canvas', 'render_scene'
]
