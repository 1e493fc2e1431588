from .glad_distill_classifier import GLADDistillClassifier

__all__ = ['GLADDistillClassifier']
