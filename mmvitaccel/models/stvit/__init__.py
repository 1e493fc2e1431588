"""STViT and STViT-R: semantic tokens, recovery and dumbbell units
(``docs/stvit.md``). The Swin-based parts register only where mmdet
imports, the Video Swin one where mmaction2 does."""
from mmvitaccel.models.stvit.semantic_vit_layer import CrossAttentionViTLayer
from mmvitaccel.models.stvit.stvit_deit import STViTDeiT
from mmvitaccel.registry import MODELS
from mmvitaccel.toolboxes import import_optional

#: our module -> (the toolboxes it needs, its registered names, other
#: exported names)
_OPTIONAL = {
    'semantic_attention': (('mmdet', ), [],
                           ['CrossAttentionSwinBlock', 'MaskedWindowSwinBlock']),
    'stvit_swin': (('mmdet', ), ['STViTSwinTransformer'],
                   ['SemanticGlobalBlockSequence', 'SemanticSwinBlockSequence',
                    'SemanticSwinTransformer', 'STViTSwinBlockSequence']),
    'stvit_r_swin': (('mmdet', ), ['STViTRSwinTransformer'],
                     ['DumbbellSwinBlockSequence']),
    'stvit_swin3d': (('mmaction', ), ['STViTSwinTransformer3D'],
                     ['CrossAttentionSwinBlock3D', 'STViTSwinBlockSequence3D']),
}

__all__ = ['CrossAttentionViTLayer', 'STViTDeiT']
for _module, (_toolboxes, _names, _exported) in _OPTIONAL.items():
    import_optional(f'{__name__}.{_module}', _toolboxes, _names,
                    [MODELS] if _names else [], globals(), _exported)
    __all__ += _names + _exported
__all__ = sorted(__all__)
