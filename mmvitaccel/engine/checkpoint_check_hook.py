"""Refuse runner checkpoints that do not belong to the model (``load_from``,
``--resume``), instead of training on from random weights."""
import re

from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper

from ..models.utils import MIN_LOADED_SHARE, describe_checkpoint
from ..registry import HOOKS


@HOOKS.register_module()
class CheckpointCheckHook(Hook):
    """Check each checkpoint the runner loads before it reaches the model.

    mmengine loads ``load_from`` non-strictly and only logs the keys that did
    not match, so the weights of another architecture "load" as nothing and
    training starts from scratch. This hook runs in ``after_load_checkpoint``
    (before the weights are copied) and raises when:

    * fewer than ``min_loaded_share`` of the model's tensors find a tensor of
      the same name and shape in the checkpoint (after the runner's
      ``module.`` prefix removal); the message names what the checkpoint
      appears to be;
    * the runner resumes (``--resume``/``resume=True``) from a checkpoint
      without the runner state (``meta``), e.g. a backbone or converted
      checkpoint, which mmengine would answer with ``KeyError: 'meta'``.

    ``tools/train.py`` and ``tools/test.py`` add it to every config; the
    config key ``checkpoint_check=dict(min_loaded_share=...)`` sets the
    threshold, and ``min_loaded_share=0`` turns the share check off.

    Args:
        min_loaded_share (float): in ``[0, 1]``.
    """

    priority = 'VERY_HIGH'

    def __init__(self, min_loaded_share=MIN_LOADED_SHARE):
        if not isinstance(min_loaded_share, (int, float)) or \
                not 0 <= min_loaded_share <= 1:
            raise ValueError('min_loaded_share must be a number in [0, 1], '
                             f'got {min_loaded_share!r}')
        self.min_loaded_share = min_loaded_share

    def after_load_checkpoint(self, runner, checkpoint):
        source = (f'the checkpoint {runner._load_from}'
                  if runner._load_from else 'the checkpoint')
        if runner._resume and 'meta' not in checkpoint:
            raise ValueError(
                f'--resume needs a checkpoint written by the training runner '
                f'(with meta, optimizer and message_hub); {source} holds '
                f'weights only (keys: {sorted(checkpoint)[:5]}). To start '
                f'from these weights, pass them as load_from (--cfg-options '
                f'load_from=PATH) without --resume.')
        if self.min_loaded_share == 0:
            return
        state = checkpoint.get('state_dict', checkpoint)
        if not isinstance(state, dict):
            raise ValueError(f'{source} has no state dict')
        state = {re.sub(r'^module\.', '', k): v for k, v in state.items()}
        model = runner.model.module if is_model_wrapper(runner.model) \
            else runner.model
        own = model.state_dict()
        if not own:
            return
        matched = sum(1 for k, v in own.items()
                      if k in state and getattr(state[k], 'shape', None) == v.shape)
        share = matched / len(own)
        if share < self.min_loaded_share:
            raise ValueError(
                f'{source} matches {matched} of the {len(own)} tensors of '
                f'this {type(model).__name__} ({share:.0%}; at least '
                f'{self.min_loaded_share:.0%} needed), so it is not a '
                f'checkpoint of this model. It looks like '
                f'{describe_checkpoint(state)}. For host weights use the '
                f'backbone init_cfg=dict(type=\'Pretrained\', checkpoint=...) '
                f'instead; to load it anyway set --cfg-options '
                f'checkpoint_check.min_loaded_share=0.')
