from mmvitaccel.engine.checkpoint_check_hook import CheckpointCheckHook
from mmvitaccel.engine.dense_sparse_hook import DenseSparseAlternateHook
from mmvitaccel.engine.min_lr_average_hook import MinLRAverageHook
from mmvitaccel.engine.step_seed_hook import StepSeedHook

__all__ = [
    'CheckpointCheckHook', 'DenseSparseAlternateHook', 'MinLRAverageHook',
    'StepSeedHook'
]
