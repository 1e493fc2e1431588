"""Random streams that depend on the training step only, so that a resumed
run repeats an uninterrupted one exactly."""
import random

import numpy as np
import torch
from mmengine.dist import get_rank
from mmengine.hooks import Hook

from mmvitaccel.registry import HOOKS


@HOOKS.register_module()
class StepSeedHook(Hook):
    """Re-seed Python's, numpy's and torch's global generators from
    ``(seed, epoch)`` at the start of each training epoch and from
    ``(seed, iteration)`` before each training iteration.

    mmengine's checkpoints do not hold the generators' states, and the
    validation between epochs draws from them too, so a run resumed from a
    checkpoint would otherwise see other augmentations and drop-path masks
    than the uninterrupted run. With this hook every random draw of epoch
    ``e`` (data augmentation, batch augments, drop path, dropout) is a
    function of the seed and the step alone: resuming from an epoch
    checkpoint reproduces the uninterrupted run bit for bit on the same
    machine (tested in ``tests/test_resume.py``). The same idea as re-seeding
    per update in other training frameworks.

    Limits: workers of a dataloader with ``num_workers > 0`` seed
    themselves from torch's generator when each epoch's iterator is made,
    which happens after ``before_train_epoch``, so they are covered too; with
    ``persistent_workers=True`` they are not re-seeded per epoch. An
    iteration-based loop skips the trained batches on resume by drawing
    them again, which consumes random numbers; resume equality is
    guaranteed for epoch checkpoints of epoch-based loops.

    Args:
        seed (int, optional): base seed; None takes the runner's
            (``randomness.seed``).
    """

    priority = 'VERY_HIGH'

    def __init__(self, seed=None):
        if seed is not None and not isinstance(seed, int):
            raise TypeError(f'seed must be an int or None, got {seed!r}')
        self.seed = seed

    def _reseed(self, runner, kind, step):
        base = self.seed if self.seed is not None else runner.seed
        entropy = [int(base or 0), kind, int(step)]
        if (runner._randomness_cfg or {}).get('diff_rank_seed', False):
            entropy.append(get_rank())
        state = np.random.SeedSequence(entropy).generate_state(2)
        seed = int(state[0]) << 32 | int(state[1])
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed % 2**63)

    def before_train_epoch(self, runner):
        self._reseed(runner, 0, runner.epoch)

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        self._reseed(runner, 1, runner.iter)
