"""The registered components, one subpackage per method (:mod:`.stvit`,
:mod:`.token_pruning`, :mod:`.dgssa`, :mod:`.hvit`, :mod:`.tome`), and the
shared :mod:`.utils` and :mod:`.distill`."""
from mmvitaccel.models import (dgssa, distill, hvit, stvit, tome,
                               token_pruning, utils)
from mmvitaccel.models.dgssa import *  # noqa: F401,F403
from mmvitaccel.models.hvit import *  # noqa: F401,F403
from mmvitaccel.models.stvit import *  # noqa: F401,F403
from mmvitaccel.models.token_pruning import *  # noqa: F401,F403
from mmvitaccel.models.tome import *  # noqa: F401,F403

__all__ = (['dgssa', 'distill', 'hvit', 'stvit', 'token_pruning', 'tome',
            'utils'] + dgssa.__all__ + hvit.__all__ + stvit.__all__ +
           token_pruning.__all__ + tome.__all__)
