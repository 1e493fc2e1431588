from .stvit_deit import STViTDeiT
from .stvit_r_swin import DumbbellSwinBlockSequence, STViTRSwinTransformer

__all__ = ['DumbbellSwinBlockSequence', 'STViTDeiT', 'STViTRSwinTransformer']
