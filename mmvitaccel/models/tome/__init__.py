"""Token merging (ToMe, Bolya et al., ICLR 2023) on the upstream hosts
(``docs/tome.md``); the Swin backbone registers only where mmdet imports."""
from mmvitaccel.models.tome.tome_vit import (ToMeVisionTransformer,
                                             tome_layer_forward)
from mmvitaccel.registry import MODELS
from mmvitaccel.toolboxes import import_optional

import_optional(f'{__name__}.tome_swin', ('mmdet', ),
                ['ToMeSwinTransformer'], [MODELS], globals())

__all__ = ['ToMeSwinTransformer', 'ToMeVisionTransformer',
           'tome_layer_forward']
