"""Read runner checkpoints (``load_from``, ``--resume``) through our
backbones' readers, report what loads, and refuse those that do not belong
to the model, instead of training on from random weights."""
import re
from collections import OrderedDict

from mmengine.hooks import Hook
from mmengine.logging import MMLogger
from mmengine.model import is_model_wrapper

from mmvitaccel.models.utils import PretrainedMixin
from mmvitaccel.models.utils.load_report import (MIN_LOADED_SHARE,
                                                 compare_state_dict,
                                                 describe_checkpoint,
                                                 loaded_share, log_report_keys,
                                                 report_summary)
from mmvitaccel.registry import HOOKS


def convert_host_parts(model, state):
    """Put the backbone part of ``state`` in the model's names where it is
    in its host's layout.

    An upstream model's checkpoint (an mmdet Swin detector, an mmpretrain
    DeiT classifier) names its backbone as the upstream backbone does; a
    backbone of ours that changed layers reads it with its own reader
    (:meth:`~mmvitaccel.models.utils.PretrainedMixin.
    host_layout_state_dict`: DGSSA's V from the host's QKV, hMHSA's halved
    Q/K, a Swin in another toolbox's names). The converted part replaces
    the original when more of the model's tensors then load.

    Args:
        model (nn.Module): the model.
        state (dict): the checkpoint's ``{name: tensor}``, changed in place.

    Returns:
        tuple[tuple[str], list[str], bool]: the prefixes of the tensors the
        methods add (new, not missing), the conversion notes, and whether
        ``state`` changed.
    """
    new, notes, changed = [], [], False
    own = model.state_dict()
    for name, module in model.named_modules():
        if not name or not isinstance(module, PretrainedMixin) or \
                module.host_state_dict is None:
            continue
        prefix = name + '.'
        new += [prefix + p for p in module.new_parameter_prefixes]
        part = OrderedDict((k[len(prefix):], v) for k, v in state.items()
                           if k.startswith(prefix))
        if not part:
            continue
        try:
            converted, fresh, converted_notes = \
                module.host_layout_state_dict(part)
        except Exception as err:  # an attempt: the names may match as is
            notes.append(f'{name}: not read as its host\'s layout '
                         f'({type(err).__name__}: {err})')
            continue
        before = compare_state_dict(own, state)[0]['loaded']
        trial = OrderedDict((k, v) for k, v in state.items()
                            if not k.startswith(prefix))
        trial.update((prefix + k, v) for k, v in converted.items())
        if len(compare_state_dict(own, trial)[0]['loaded']) > len(before):
            state.clear()
            state.update(trial)
            new += [prefix + f for f in fresh]
            changed = True
            notes += [f'{name}: read as its host\'s layout by '
                      f'{type(module).__name__}'] + converted_notes
    return tuple(dict.fromkeys(new)), notes, changed


@HOOKS.register_module()
class CheckpointCheckHook(Hook):
    """Check each checkpoint the runner loads before it reaches the model.

    mmengine loads ``load_from`` non-strictly and only logs the keys that did
    not match, so the weights of another architecture "load" as nothing and
    training starts from scratch. This hook runs in ``after_load_checkpoint``
    (before the weights are copied). It first puts a backbone part in its
    host's layout into the model's names (:func:`convert_host_parts`: an
    upstream checkpoint loads into a config ``tools/accelerate.py`` wrote),
    then logs the full report (loaded, new, missing, unused, mismatched;
    each of the model's tensors counted once, e.g. ``loaded 152/152; new 0,
    missing 0, unused 0``), kept as :attr:`report`, and raises when:

    * fewer than ``min_loaded_share`` of the model's tensors find a tensor of
      the same name and shape in the checkpoint (after the runner's
      ``module.`` prefix removal); the message names what the checkpoint
      appears to be;
    * the runner resumes (``--resume``/``resume=True``) from a checkpoint
      without the runner state (``meta``), e.g. a backbone or converted
      checkpoint, which mmengine would answer with ``KeyError: 'meta'``.

    ``tools/train.py`` and ``tools/test.py`` add it to every config, and
    ``tools/accelerate.py`` writes it into ``custom_hooks``; the config key
    ``checkpoint_check=dict(min_loaded_share=...)`` sets the threshold
    under any runner, and ``min_loaded_share=0`` turns the share check off.

    Args:
        min_loaded_share (float, optional): in ``[0, 1]``; None (default)
            reads the runner config's ``checkpoint_check``, else
            :data:`MIN_LOADED_SHARE`.
    """

    priority = 'VERY_HIGH'

    def __init__(self, min_loaded_share=None):
        if min_loaded_share is not None:
            _check_share(min_loaded_share)
        self.min_loaded_share = min_loaded_share
        #: the last checkpoint's report: key lists ``loaded``, ``new``,
        #: ``missing``, ``unused``, ``mismatched`` and ``converted`` notes
        self.report = None

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
        state = checkpoint.get('state_dict', checkpoint)
        if not isinstance(state, dict):
            raise ValueError(f'{source} has no state dict')
        stripped = OrderedDict((re.sub(r'^module\.', '', k), v)
                               for k, v in state.items())
        model = runner.model.module if is_model_wrapper(runner.model) \
            else runner.model
        own = model.state_dict()
        if not own:
            return
        new, notes, changed = convert_host_parts(model, stripped)
        if changed:  # the runner loads the converted names
            state.clear()
            state.update(stripped)
        report, _ = compare_state_dict(own, stripped, new)
        report['converted'] = notes
        self.report = report
        _log_report(report, source)
        needed = self.min_loaded_share
        if needed is None:
            options = (getattr(runner, 'cfg', None) or {}).get(
                'checkpoint_check') or {}
            needed = _check_share(
                options.get('min_loaded_share', MIN_LOADED_SHARE))
        if needed == 0:
            return
        share, expected = loaded_share(report)
        matched = len(report['loaded'])
        if share < needed:
            raise ValueError(
                f'{source} matches {matched} of the {expected} tensors of '
                f'this {type(model).__name__} ({share:.0%}; at least '
                f'{needed:.0%} needed; '
                f'{report_summary(report)}), so it is not a '
                f'checkpoint of this model. It looks like '
                f'{describe_checkpoint(state)}. For host weights use the '
                f'backbone init_cfg=dict(type=\'Pretrained\', checkpoint=...) '
                f'instead; to load it anyway set --cfg-options '
                f'checkpoint_check.min_loaded_share=0.')


def _check_share(share):
    """``share`` if it is a number in ``[0, 1]``.

    Raises:
        ValueError: naming the allowed range.
    """
    if isinstance(share, bool) or not isinstance(share, (int, float)) or \
            not 0 <= share <= 1:
        raise ValueError('min_loaded_share must be a number in [0, 1], '
                         f'got {share!r}')
    return share


def _log_report(report, source):
    logger = MMLogger.get_current_instance()
    logger.info(f'{source}: {report_summary(report)}')
    for note in report['converted']:
        logger.info(f'converted: {note}')
    log_report_keys(report, logger)
