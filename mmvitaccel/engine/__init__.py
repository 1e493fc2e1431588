from .tiny_runner import TinyRunner

__all__ = ['TinyRunner']
from .dense_sparse_hook import DenseSparseAlternateHook  # noqa: E402

__all__ += ['DenseSparseAlternateHook']
