from .dgssa_swin import DGSSASwinTransformer
from .dgssa_vit import DGSSAVisionTransformer
from .hvit_base import HViTHostMixin
from .hvit_deit import HViTDeiT
from .hvit_pvtv2 import HViTPyramidVisionTransformerV2
from .hvit_swin import HViTSwinTransformer
from .stvit_deit import STViTDeiT
from .stvit_r_swin import DumbbellSwinBlockSequence, STViTRSwinTransformer
from .stvit_swin import (SemanticGlobalBlockSequence,
                         SemanticSwinBlockSequence, SemanticSwinTransformer,
                         STViTSwinBlockSequence, STViTSwinTransformer)
from .stvit_swin3d import (CrossAttentionSwinBlock3D, STViTSwinBlockSequence3D,
                           STViTSwinTransformer3D)

__all__ = [
    'CrossAttentionSwinBlock3D', 'DGSSASwinTransformer',
    'DGSSAVisionTransformer', 'DumbbellSwinBlockSequence', 'HViTDeiT',
    'HViTHostMixin', 'HViTPyramidVisionTransformerV2', 'HViTSwinTransformer',
    'SemanticGlobalBlockSequence', 'SemanticSwinBlockSequence',
    'SemanticSwinTransformer', 'STViTDeiT', 'STViTRSwinTransformer',
    'STViTSwinBlockSequence', 'STViTSwinBlockSequence3D',
    'STViTSwinTransformer', 'STViTSwinTransformer3D'
]
from .token_pruned_vit import TokenPrunedVisionTransformer  # noqa: E402

__all__ += ['TokenPrunedVisionTransformer']
