from . import backbones, layers, utils  # noqa: F401
from .backbones import *  # noqa: F401,F403

__all__ = ['backbones', 'layers', 'utils']
from . import classifiers  # noqa: F401,E402
from .classifiers import *  # noqa: F401,F403,E402

__all__ += ['classifiers']
from . import necks  # noqa: F401,E402
from .necks import *  # noqa: F401,F403,E402

__all__ += ['necks']
