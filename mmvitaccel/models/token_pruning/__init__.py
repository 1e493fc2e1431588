"""SaiT and AS-ViT token pruning (``docs/token_pruning.md``);
:class:`TokenRestoreNeck` registers only where mmseg imports."""
from mmvitaccel.models.token_pruning.token_pruned_classifier import \
    TokenPrunedClassifier
from mmvitaccel.models.token_pruning.token_pruned_vit import \
    TokenPrunedVisionTransformer
from mmvitaccel.registry import MODELS
from mmvitaccel.toolboxes import import_optional

import_optional(f'{__name__}.token_restore_neck', ('mmseg', ),
                ['TokenRestoreNeck'], [MODELS], globals())

__all__ = [
    'TokenPrunedClassifier', 'TokenPrunedVisionTransformer', 'TokenRestoreNeck'
]
