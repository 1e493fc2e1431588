from .stvit_r_swin import DumbbellSwinBlockSequence, STViTRSwinTransformer
from .stvit_swin3d import (CrossAttentionSwinBlock3D, STViTSwinBlockSequence3D,
                           STViTSwinTransformer3D)
from .stvit_swin import (SemanticGlobalBlockSequence,
                         SemanticSwinBlockSequence, SemanticSwinTransformer,
                         STViTSwinBlockSequence, STViTSwinTransformer)

__all__ = [
    'DumbbellSwinBlockSequence', 'STViTRSwinTransformer',
    'SemanticGlobalBlockSequence', 'SemanticSwinBlockSequence',
    'SemanticSwinTransformer', 'STViTSwinBlockSequence',
    'STViTSwinTransformer', 'CrossAttentionSwinBlock3D',
    'STViTSwinBlockSequence3D', 'STViTSwinTransformer3D'
]
