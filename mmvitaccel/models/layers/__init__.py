from .semantic_attention import (CrossAttentionSwinBlock, MaskedWindowSwinBlock,
                                 cross_attention, project_key_values)
from .semantic_vit_layer import CrossAttentionViTLayer

__all__ = [
    'CrossAttentionSwinBlock', 'CrossAttentionViTLayer',
    'MaskedWindowSwinBlock', 'cross_attention', 'project_key_values'
]
from .static_attention import (StaticMultiheadAttention,
                               StaticShiftWindowMSA, StaticWindowMSA,
                               relative_position_bias, shift_regions,
                               vit_attention, window_attention)

__all__ += [
    'StaticMultiheadAttention', 'StaticShiftWindowMSA', 'StaticWindowMSA',
    'relative_position_bias', 'shift_regions', 'vit_attention',
    'window_attention'
]
