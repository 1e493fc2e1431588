"""The registered components, one subpackage per method.

:mod:`.stvit` (STViT, STViT-R), :mod:`.token_pruning` (SaiT, AS-ViT),
:mod:`.dgssa` (DGSSA, GLAD) and :mod:`.hvit` (hMHSA, cFFN) each hold their
backbones, layers, heads or necks and checkpoint readers; :mod:`.utils` the
shared host blocks and readers, :mod:`.distill` the shared distillation.
Components on mmdet, mmseg or mmaction2 blocks register only where that
toolbox imports (:mod:`mmvitaccel.toolboxes`).
"""
from mmvitaccel.models import dgssa, distill, hvit, stvit, token_pruning, utils
from mmvitaccel.models.dgssa import *  # noqa: F401,F403
from mmvitaccel.models.hvit import *  # noqa: F401,F403
from mmvitaccel.models.stvit import *  # noqa: F401,F403
from mmvitaccel.models.token_pruning import *  # noqa: F401,F403

__all__ = (['dgssa', 'distill', 'hvit', 'stvit', 'token_pruning', 'utils'] +
           dgssa.__all__ + hvit.__all__ + stvit.__all__ +
           token_pruning.__all__)
