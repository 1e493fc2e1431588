from .semantic_attention import (CrossAttentionSwinBlock, MaskedWindowSwinBlock,
                                 cross_attention, project_key_values)
from .semantic_vit_layer import CrossAttentionViTLayer

__all__ = [
    'CrossAttentionSwinBlock', 'CrossAttentionViTLayer',
    'MaskedWindowSwinBlock', 'cross_attention', 'project_key_values'
]
from .cffn import compact_ffn  # noqa: E402
from .hmhsa_attention import (HallucinatedAttentionMixin,  # noqa: E402
                              HallucinatedMultiheadAttention, HallucinatedSRA,
                              HallucinatedWindowMSA, HViTEncoderLayer,
                              is_hallucinated, resolve_hmhsa_stages,
                              square_grid)

__all__ += [
    'compact_ffn', 'HallucinatedAttentionMixin',
    'HallucinatedMultiheadAttention', 'HallucinatedSRA',
    'HallucinatedWindowMSA', 'HViTEncoderLayer', 'is_hallucinated',
    'resolve_hmhsa_stages', 'square_grid'
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
