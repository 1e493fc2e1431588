from . import backbones, classifiers, layers, necks, utils  # noqa: F401
from .backbones import *  # noqa: F401,F403
from .classifiers import *  # noqa: F401,F403
from .necks import *  # noqa: F401,F403

__all__ = ['backbones', 'classifiers', 'layers', 'necks', 'utils']
