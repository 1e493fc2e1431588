"""Load public host checkpoints into backbones that keep the host's names.

Video Swin checkpoints (mmaction2 and the official release share names)
load as they are. For 2-D Swin, three layouts are recognised and mapped to
mmdet's Swin names (which mmpretrain's Swin shares exactly):

* official Swin (microsoft): ``layers.{i}.blocks.{j}.attn.qkv``,
  ``patch_embed.proj`` ... converted with mmdet's ``swin_converter``;
* mmdet / mmseg Swin: ``backbone.stages.{i}...`` inside a detector or
  segmentor checkpoint, or bare;
* mmpretrain Swin: ``backbone.stages.{i}...`` inside a classifier.

Loading reports four kinds of keys, so that a user sees exactly what a
checkpoint did and did not provide: *new* (parameters the method adds,
expected to be absent), *missing* (expected but absent), *unused* (in the
checkpoint, not in the model; e.g. the position tables of blocks that became
cross-attention) and *mismatched* (same name, different shape; skipped).
"""
from collections import OrderedDict

from mmdet.models.backbones.swin import swin_converter
from mmengine.logging import MMLogger
from mmengine.runner.checkpoint import CheckpointLoader


def _strip(state_dict, prefix):
    if all(k.startswith(prefix) for k in state_dict):
        return OrderedDict((k[len(prefix):], v) for k, v in state_dict.items())
    return state_dict


def _backbone_weights(checkpoint, convert=None):
    """Load, unwrap (``state_dict``/``model``, ``module.``), optionally
    ``convert`` a layout, and keep the ``backbone.`` part if there is one.
    """
    if isinstance(checkpoint, str):
        checkpoint = CheckpointLoader.load_checkpoint(
            checkpoint, map_location='cpu')
    for key in ('state_dict', 'model'):
        if key in checkpoint and isinstance(checkpoint[key], dict):
            checkpoint = checkpoint[key]
            break
    state_dict = _strip(OrderedDict(checkpoint), 'module.')
    if convert is not None:
        state_dict = convert(state_dict)
    if any(k.startswith('backbone.') for k in state_dict):
        state_dict = OrderedDict((k[len('backbone.'):], v)
                                 for k, v in state_dict.items()
                                 if k.startswith('backbone.'))
    return state_dict


def _convert_official_swin(state_dict):
    if 'patch_embed.proj.weight' in state_dict:  # microsoft layout
        return swin_converter(state_dict)
    return state_dict


def swin_state_dict(checkpoint):
    """Backbone weights of a Swin checkpoint, in mmdet's Swin names.

    Args:
        checkpoint (str | dict): a path/URL, or an already loaded
            checkpoint (a state dict or a dict with ``state_dict``/``model``).

    Returns:
        OrderedDict: ``{name: tensor}`` without any ``backbone.`` prefix.
    """
    return _backbone_weights(checkpoint, _convert_official_swin)


def video_swin_state_dict(checkpoint):
    """Backbone weights of a Video Swin checkpoint (mmaction2, or the
    official release, which shares its names: ``layers.{i}.blocks.{j}...``).

    Args:
        checkpoint (str | dict): a path/URL, or an already loaded
            checkpoint (a state dict or a dict with ``state_dict``/``model``).

    Returns:
        OrderedDict: ``{name: tensor}`` without any ``backbone.`` prefix.
    """
    return _backbone_weights(checkpoint)


def load_with_report(module, state_dict, new_prefixes=(), logger=None):
    """Load ``state_dict`` non-strictly and report what happened.

    Args:
        module (nn.Module): the model.
        state_dict (dict): weights in the model's names.
        new_prefixes (Sequence[str]): name prefixes of parameters the
            method adds (not expected in a checkpoint of the host).
        logger (MMLogger, optional): where the report goes.

    Returns:
        dict: lists of keys under ``loaded``, ``new``, ``missing``,
        ``unused`` and ``mismatched``.
    """
    own = module.state_dict()
    loadable = OrderedDict()
    report = dict(loaded=[], new=[], missing=[], unused=[], mismatched=[])
    for key, value in state_dict.items():
        if key not in own:
            report['unused'].append(key)
        elif own[key].shape != value.shape:
            report['mismatched'].append(
                f'{key}: checkpoint {tuple(value.shape)}, model '
                f'{tuple(own[key].shape)}')
        else:
            loadable[key] = value
            report['loaded'].append(key)
    for key in own:
        if key not in loadable:
            kind = 'new' if key.startswith(tuple(new_prefixes)) else 'missing'
            report[kind].append(key)
    module.load_state_dict(loadable, strict=False)
    logger = logger or MMLogger.get_current_instance()
    logger.info(f'{type(module).__name__}: loaded {len(report["loaded"])} '
                f'tensors from the checkpoint')
    for kind in ('new', 'missing', 'unused', 'mismatched'):
        if report[kind]:
            logger.warning(f'{kind} keys ({len(report[kind])}): ' +
                           ', '.join(report[kind]))
    return report
