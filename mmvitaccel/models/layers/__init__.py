from .cffn import compact_ffn
from .conv_stem import ConvStem
from .hmhsa_attention import (HallucinatedAttentionMixin,
                              HallucinatedMultiheadAttention, HallucinatedSRA,
                              HallucinatedWindowMSA, HViTEncoderLayer,
                              is_hallucinated, resolve_hmhsa_stages,
                              square_grid)
from .semantic_attention import (cross_attention, CrossAttentionSwinBlock,
                                 MaskedWindowSwinBlock, project_key_values)
from .semantic_vit_layer import CrossAttentionViTLayer
from .static_attention import (relative_position_bias, shift_regions,
                               StaticMultiheadAttention, StaticShiftWindowMSA,
                               StaticWindowMSA, vit_attention,
                               window_attention)

__all__ = [
    'compact_ffn', 'ConvStem', 'HallucinatedAttentionMixin',
    'HallucinatedMultiheadAttention', 'HallucinatedSRA',
    'HallucinatedWindowMSA', 'HViTEncoderLayer', 'is_hallucinated',
    'resolve_hmhsa_stages', 'square_grid', 'cross_attention',
    'CrossAttentionSwinBlock', 'MaskedWindowSwinBlock', 'project_key_values',
    'CrossAttentionViTLayer', 'relative_position_bias', 'shift_regions',
    'StaticMultiheadAttention', 'StaticShiftWindowMSA', 'StaticWindowMSA',
    'vit_attention', 'window_attention'
]
