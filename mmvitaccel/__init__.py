"""mmvitaccel: token sparsification and attention acceleration for vision
transformers, as an OpenMMLab 2.x plugin.

``custom_imports=dict(imports=['mmvitaccel'], allow_failed_imports=False)``
in a config registers the models, losses and hooks under the ``mmvitaccel``
scope. The import changes no upstream object: the environment fixes of
:mod:`mmvitaccel.compat` are applied by our tools, or by an explicit
``mmvitaccel.compat.apply()``. Components that need mmdet, mmseg or
mmaction2 register where that toolbox imports (:mod:`mmvitaccel.toolboxes`).
The research harness (:mod:`projects.digits_study.datasets`, :mod:`mmvitaccel.tiny`)
is imported on demand: by the registry when a config names one of its
types, or by our tools.
"""
from mmvitaccel import (compat, engine, models, toolboxes)  # noqa: F401  (registers)
from mmvitaccel.version import __version__

__all__ = ['__version__']
