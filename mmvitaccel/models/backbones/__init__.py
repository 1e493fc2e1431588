from .stvit_deit import STViTDeiT
from .stvit_r_swin import DumbbellSwinBlockSequence, STViTRSwinTransformer
from .stvit_swin import (SemanticGlobalBlockSequence,
                         SemanticSwinBlockSequence, SemanticSwinTransformer,
                         STViTSwinBlockSequence, STViTSwinTransformer)
from .stvit_swin3d import (CrossAttentionSwinBlock3D, STViTSwinBlockSequence3D,
                           STViTSwinTransformer3D)

__all__ = [
    'CrossAttentionSwinBlock3D', 'DumbbellSwinBlockSequence',
    'SemanticGlobalBlockSequence', 'SemanticSwinBlockSequence',
    'SemanticSwinTransformer', 'STViTDeiT', 'STViTRSwinTransformer',
    'STViTSwinBlockSequence', 'STViTSwinBlockSequence3D',
    'STViTSwinTransformer', 'STViTSwinTransformer3D'
]
from .hvit_base import HViTHostMixin  # noqa: E402
from .hvit_deit import HViTDeiT  # noqa: E402
from .hvit_pvtv2 import HViTPyramidVisionTransformerV2  # noqa: E402
from .hvit_swin import HViTSwinTransformer  # noqa: E402

__all__ += [
    'HViTHostMixin', 'HViTDeiT', 'HViTPyramidVisionTransformerV2',
    'HViTSwinTransformer'
]
