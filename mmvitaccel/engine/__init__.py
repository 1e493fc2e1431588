from .tiny_runner import TinyRunner

__all__ = ['TinyRunner']
