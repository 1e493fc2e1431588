from . import layers  # noqa: F401

__all__ = ['layers']
