"""DGSSA and GLAD (``docs/dgssa_glad.md``); the Swin backbone registers only
where mmdet imports."""
from mmvitaccel.models.dgssa.dgssa_vit import DGSSAVisionTransformer
from mmvitaccel.models.dgssa.glad_distill_classifier import \
    GLADDistillClassifier
from mmvitaccel.models.dgssa.static_attention import (StaticMultiheadAttention,
                                                      StaticShiftWindowMSA,
                                                      StaticWindowMSA,
                                                      relative_position_bias,
                                                      shift_regions,
                                                      vit_attention,
                                                      window_attention)
from mmvitaccel.models.dgssa.static_checkpoint import (fresh_static_init,
                                                       static_attention_state_dict)
from mmvitaccel.registry import MODELS
from mmvitaccel.toolboxes import import_optional

import_optional(f'{__name__}.dgssa_swin', ('mmdet', ),
                ['DGSSASwinTransformer'], [MODELS], globals())

__all__ = [
    'DGSSASwinTransformer', 'DGSSAVisionTransformer', 'GLADDistillClassifier',
    'StaticMultiheadAttention', 'StaticShiftWindowMSA', 'StaticWindowMSA',
    'fresh_static_init', 'relative_position_bias', 'shift_regions',
    'static_attention_state_dict', 'vit_attention', 'window_attention'
]
