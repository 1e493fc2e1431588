from .semantic_attention import CrossAttentionSwinBlock, MaskedWindowSwinBlock

__all__ = ['CrossAttentionSwinBlock', 'MaskedWindowSwinBlock']
