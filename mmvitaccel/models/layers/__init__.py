from .semantic_attention import (CrossAttentionSwinBlock, MaskedWindowSwinBlock,
                                 cross_attention, project_key_values)
from .semantic_vit_layer import CrossAttentionViTLayer

__all__ = [
    'CrossAttentionSwinBlock', 'CrossAttentionViTLayer',
    'MaskedWindowSwinBlock', 'cross_attention', 'project_key_values'
]
