from .glad_distill_classifier import GLADDistillClassifier
from .token_pruned_classifier import (TokenPrunedClassifier, build_teacher,
                                      kl_divergence)

__all__ = [
    'GLADDistillClassifier', 'TokenPrunedClassifier', 'build_teacher',
    'kl_divergence'
]
