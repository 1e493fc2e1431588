"""The layers the backbones build; those on mmdet blocks are exported only
where mmdet imports (elsewhere a stand-in that names it when built,
:mod:`mmvitaccel.toolboxes`)."""
from ...ops import cross_attention, project_key_values
from ...toolboxes import import_optional
from .cffn import compact_ffn
from .conv_stem import ConvStem
from .hmhsa_attention import (HallucinatedAttentionMixin,
                              HallucinatedMultiheadAttention,
                              HallucinatedWindowMSA, HViTEncoderLayer,
                              is_hallucinated, resolve_hmhsa_stages,
                              square_grid)
from .semantic_vit_layer import CrossAttentionViTLayer
from .static_attention import (relative_position_bias, shift_regions,
                               StaticMultiheadAttention, StaticShiftWindowMSA,
                               StaticWindowMSA, vit_attention,
                               window_attention)

import_optional(f'{__name__}.hmhsa_sra', ('mmdet', ), [], [], globals(),
                exported=['HallucinatedSRA'])
import_optional(f'{__name__}.semantic_attention', ('mmdet', ), [], [],
                globals(),
                exported=['CrossAttentionSwinBlock', 'MaskedWindowSwinBlock'])

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
