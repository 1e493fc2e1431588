from .stvit_r_swin import DumbbellSwinBlockSequence, STViTRSwinTransformer
from .stvit_swin import (SemanticGlobalBlockSequence,
                         SemanticSwinBlockSequence, SemanticSwinTransformer,
                         STViTSwinBlockSequence, STViTSwinTransformer)

__all__ = [
    'DumbbellSwinBlockSequence', 'STViTRSwinTransformer',
    'SemanticGlobalBlockSequence', 'SemanticSwinBlockSequence',
    'SemanticSwinTransformer', 'STViTSwinBlockSequence',
    'STViTSwinTransformer'
]
