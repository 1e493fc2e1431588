from . import backbones, layers, utils  # noqa: F401
from .backbones import *  # noqa: F401,F403

__all__ = ['backbones', 'layers', 'utils']
