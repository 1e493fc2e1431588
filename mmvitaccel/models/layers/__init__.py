from .semantic_attention import CrossAttentionSwinBlock, MaskedWindowSwinBlock
from .semantic_vit_layer import CrossAttentionViTLayer

__all__ = [
    'CrossAttentionSwinBlock', 'CrossAttentionViTLayer',
    'MaskedWindowSwinBlock'
]
