"""STViT and STViT-R (``docs/stvit.md``); Swin parts need mmdet/mmaction2."""
from mmvitaccel.models.stvit.semantic_vit_layer import CrossAttentionViTLayer
from mmvitaccel.models.stvit.stvit_deit import STViTDeiT
from mmvitaccel.registry import MODELS
from mmvitaccel.toolboxes import import_optional

#: module -> (toolboxes needed, registered names, other exports)
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
