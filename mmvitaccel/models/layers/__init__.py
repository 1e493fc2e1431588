from .semantic_attention import (CrossAttentionSwinBlock, MaskedWindowSwinBlock,
                                 cross_attention, project_key_values)

__all__ = [
    'CrossAttentionSwinBlock', 'MaskedWindowSwinBlock', 'cross_attention',
    'project_key_values'
]
