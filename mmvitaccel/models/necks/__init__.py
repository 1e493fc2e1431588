"""The necks; :class:`TokenRestoreNeck` registers only where mmseg imports
(:mod:`mmvitaccel.toolboxes`)."""
from ...registry import MODELS
from ...toolboxes import import_optional

import_optional(f'{__name__}.token_restore_neck', ('mmseg', ),
                ['TokenRestoreNeck'], [MODELS], globals())

__all__ = ['TokenRestoreNeck']
