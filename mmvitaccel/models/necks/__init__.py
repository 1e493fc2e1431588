from .token_restore_neck import TokenRestoreNeck

__all__ = ['TokenRestoreNeck']
