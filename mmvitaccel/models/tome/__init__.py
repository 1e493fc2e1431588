"""Token merging (ToMe, Bolya et al., ICLR 2023) on the upstream hosts
(``docs/tome.md``)."""
from mmvitaccel.models.tome.tome_vit import (ToMeVisionTransformer,
                                             tome_layer_forward)

__all__ = ['ToMeVisionTransformer', 'tome_layer_forward']
