"""mmvitaccel: token sparsification and attention acceleration for vision
transformers, as an OpenMMLab 2.x plugin.

``custom_imports=dict(imports=['mmvitaccel'], allow_failed_imports=False)``
in a config registers every component under the ``mmvitaccel`` scope and
applies the stack fixes of :mod:`mmvitaccel.compat`.
"""
from . import compat

compat.apply()

from . import datasets, engine, models, tiny  # noqa: E402,F401  (registers)
from .version import __version__  # noqa: E402

__all__ = ['__version__']
