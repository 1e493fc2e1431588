from .stvit_r_swin import DumbbellSwinBlockSequence, STViTRSwinTransformer

__all__ = ['DumbbellSwinBlockSequence', 'STViTRSwinTransformer']
