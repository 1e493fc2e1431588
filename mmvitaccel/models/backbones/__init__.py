"""The backbones; those built on mmdet or mmaction2 blocks register only
where that toolbox imports (:mod:`mmvitaccel.toolboxes`)."""
from ...registry import MODELS
from ...toolboxes import import_optional
from .dgssa_vit import DGSSAVisionTransformer
from .hvit_base import HViTHostMixin
from .hvit_deit import HViTDeiT
from .hvit_swin import HViTSwinTransformer
from .stvit_deit import STViTDeiT
from .token_pruned_vit import TokenPrunedVisionTransformer

#: our module -> (the toolboxes it needs, its registered names, other
#: exported names)
_OPTIONAL = {
    'dgssa_swin': (('mmdet', ), ['DGSSASwinTransformer'], []),
    'hvit_pvtv2': (('mmdet', ), ['HViTPyramidVisionTransformerV2'], []),
    'stvit_r_swin': (('mmdet', ), ['STViTRSwinTransformer'],
                     ['DumbbellSwinBlockSequence']),
    'stvit_swin': (('mmdet', ), ['STViTSwinTransformer'],
                   ['SemanticGlobalBlockSequence', 'SemanticSwinBlockSequence',
                    'SemanticSwinTransformer', 'STViTSwinBlockSequence']),
    'stvit_swin3d': (('mmaction', ), ['STViTSwinTransformer3D'],
                     ['CrossAttentionSwinBlock3D', 'STViTSwinBlockSequence3D']),
}

__all__ = [
    'DGSSAVisionTransformer', 'HViTDeiT', 'HViTHostMixin',
    'HViTSwinTransformer', 'STViTDeiT', 'TokenPrunedVisionTransformer'
]
for _module, (_toolboxes, _names, _exported) in _OPTIONAL.items():
    import_optional(f'{__name__}.{_module}', _toolboxes, _names, [MODELS],
                    globals(), _exported)
    __all__ += _names + _exported
__all__ = sorted(__all__)
