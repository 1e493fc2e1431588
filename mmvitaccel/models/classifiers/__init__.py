from .token_pruned_classifier import (TokenPrunedClassifier, build_teacher,
                                      kl_divergence)

__all__ = ['TokenPrunedClassifier', 'build_teacher', 'kl_divergence']
