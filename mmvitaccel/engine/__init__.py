from .checkpoint_check_hook import CheckpointCheckHook
from .dense_sparse_hook import DenseSparseAlternateHook
from .min_lr_average_hook import MinLRAverageHook
from .step_seed_hook import StepSeedHook

__all__ = [
    'CheckpointCheckHook', 'DenseSparseAlternateHook', 'MinLRAverageHook',
    'StepSeedHook'
]
