from ..distill import build_teacher, kl_divergence
from .glad_distill_classifier import GLADDistillClassifier
from .token_pruned_classifier import TokenPrunedClassifier

__all__ = [
    'GLADDistillClassifier', 'TokenPrunedClassifier', 'build_teacher',
    'kl_divergence'
]
