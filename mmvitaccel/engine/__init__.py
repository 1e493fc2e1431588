from .dense_sparse_hook import DenseSparseAlternateHook
from .tiny_runner import TinyRunner

__all__ = ['DenseSparseAlternateHook', 'TinyRunner']
