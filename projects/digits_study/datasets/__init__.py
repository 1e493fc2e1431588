"""Registered datasets of real images that ship inside a package (no
download), for the small-scale accuracy study (``docs/study.md``).

This package imports nothing of mmvitaccel but :mod:`mmvitaccel.registry`.
"""
from projects.digits_study.datasets.digits_canvas import (DigitsCanvas,
                                                          EpochSampler,
                                                          digits_splits,
                                                          render_canvas)
from projects.digits_study.datasets.digits_clips import (CLIP_LABELS,
                                                         DigitsClips,
                                                         render_clip)
from projects.digits_study.datasets.digits_scenes import (DigitsInstances,
                                                          DigitsScenes,
                                                          DigitsSegmentation,
                                                          render_scene)

__all__ = [
    'CLIP_LABELS', 'DigitsClips', 'render_clip', 'DigitsCanvas', 'DigitsInstances', 'DigitsScenes', 'DigitsSegmentation',
    'EpochSampler', 'digits_splits', 'render_canvas', 'render_scene'
]
