"""Load a state dict with a loaded/new/missing/unused/mismatched report,
and refuse the checkpoint of another model (:func:`load_with_report`)."""
from collections import OrderedDict

from mmengine.logging import MMLogger

#: the least share of a model's expected tensors a checkpoint must provide
MIN_LOADED_SHARE = 0.5

#: the kinds of a report, in the order they are logged
REPORT_KINDS = ('new', 'missing', 'unused', 'mismatched')

#: (keys that must all be present, description), first match wins
_LAYOUTS = (
    (('stages.0.blocks.0.attn.w_msa.qkv.weight', ),
     'a Swin (mmdet/mmseg/mmpretrain names)'),
    (('layers.0.blocks.0.attn.qkv.weight', 'patch_embed.proj.weight'),
     'a Swin or Video Swin (official/mmaction names)'),
    (('blocks.0.attn.qkv.weight', 'cls_token'),
     'a ViT/DeiT (official/timm names)'),
    (('layers.0.attn.qkv.weight', 'cls_token'),
     'a ViT/DeiT (mmpretrain names)'),
    (('patch_embed1.proj.weight', 'block1.0.attn.q.weight'),
     'a PVTv2 (official names)'),
    (('layers.0.0.projection.weight', ), 'a PVT/PVTv2 (mmdet/mmpretrain names)'),
    (('layer1.0.conv1.weight', ), 'a ResNet'),
)

#: whole-model prefixes -> what kind of model holds the backbone
_CONTAINERS = (('roi_head.', 'detector'), ('bbox_head.', 'detector'),
               ('decode_head.', 'segmentor'), ('cls_head.', 'video recognizer'),
               ('head.', 'classifier'))


def describe_checkpoint(state_dict):
    """What a state dict appears to hold, for error messages.

    Args:
        state_dict (dict): ``{name: tensor}``, bare or whole-model.

    Returns:
        str: e.g. ``'a ViT/DeiT (mmpretrain names), embed dims 384, 12
        blocks, in a classifier (152 tensors)'``.
    """
    keys = list(state_dict)
    body = {k[len('backbone.'):]: v for k, v in state_dict.items()
            if k.startswith('backbone.')} or dict(state_dict)
    kind = next((desc for need, desc in _LAYOUTS
                 if all(k in body for k in need)), None)
    if kind is None:
        shown = ', '.join(keys[:4]) + (', ...' if len(keys) > 4 else '')
        return f'an unrecognised model ({len(keys)} tensors: {shown})'
    details = []
    for name, dim in (('cls_token', -1), ('patch_embed.projection.weight', 0),
                      ('patch_embed.proj.weight', 0)):
        if name in body and hasattr(body[name], 'shape'):
            details.append(f'embed dims {body[name].shape[dim]}')
            break
    for prefix in ('blocks.', 'layers.'):
        if f'{prefix}0.attn.qkv.weight' in body:
            depth = len({k.split('.')[1] for k in body if k.startswith(prefix)})
            details.append(f'{depth} blocks')
    container = next((c for prefix, c in _CONTAINERS
                      if any(k.startswith(prefix) for k in keys)
                      and any(k.startswith('backbone.') for k in keys)), None)
    if container:
        details.append(f'in a {container}')
    return ', '.join([kind] + details) + f' ({len(keys)} tensors)'


def _min_share(module, min_share):
    if min_share is not None:
        return min_share
    init_cfg = getattr(module, 'init_cfg', None)
    if isinstance(init_cfg, dict) and 'min_loaded_share' in init_cfg:
        return init_cfg['min_loaded_share']
    return MIN_LOADED_SHARE


def compare_state_dict(own, state_dict, new_prefixes=()):
    """What of ``state_dict`` loads into a model whose state dict is
    ``own``; each key of ``own`` is exactly one of loaded, mismatched, new
    or missing (a new key of another shape is mismatched).

    Args:
        own (dict): the model's ``{name: tensor}``.
        state_dict (dict): the checkpoint's, in the model's names.
        new_prefixes (Sequence[str]): prefixes of the parameters a method adds.

    Returns:
        tuple[dict, OrderedDict]: the report (key lists ``loaded``, ``new``,
        ``missing``, ``unused``, ``mismatched``) and the loadable tensors.
    """
    loadable = OrderedDict()
    report = dict(loaded=[], new=[], missing=[], unused=[], mismatched=[])
    seen = set()
    for key, value in state_dict.items():
        if key not in own:
            report['unused'].append(key)
            continue
        seen.add(key)
        if own[key].shape != getattr(value, 'shape', None):
            report['mismatched'].append(
                f'{key}: checkpoint {tuple(getattr(value, "shape", ()))}, '
                f'model {tuple(own[key].shape)}')
        else:
            loadable[key] = value
            report['loaded'].append(key)
    new_prefixes = tuple(new_prefixes)
    for key in own:
        if key not in seen:
            kind = 'new' if key.startswith(new_prefixes) else 'missing'
            report[kind].append(key)
    return report, loadable


def loaded_share(report):
    """The loaded share of the expected (loaded, mismatched, missing).

    Args:
        report (dict): as :func:`compare_state_dict` returns it.

    Returns:
        tuple[float, int]: the share (1.0 when nothing is expected) and the
        number of expected tensors.
    """
    expected = len(report['loaded']) + len(report['missing']) + len(
        report['mismatched'])
    return (len(report['loaded']) / expected if expected else 1.0), expected


def report_summary(report):
    """The counts of a report over the model's tensors.

    Args:
        report (dict): as :func:`compare_state_dict` returns it.

    Returns:
        str: e.g. ``'loaded 152/152; new 0, missing 0, unused 0'`` (plus
        ``', mismatched N'`` when N > 0).
    """
    total = sum(len(report[k]) for k in ('loaded', 'new', 'missing',
                                         'mismatched'))
    counts = [f'{kind} {len(report[kind])}' for kind in REPORT_KINDS
              if kind != 'mismatched' or report[kind]]
    return f'loaded {len(report["loaded"])}/{total}; ' + ', '.join(counts)


def log_report_keys(report, logger):
    """Log the keys of each kind of a report that has any, as warnings.

    Args:
        report (dict): as :func:`compare_state_dict` returns it.
        logger (MMLogger): where they go.
    """
    for kind in REPORT_KINDS:
        if report[kind]:
            logger.warning(f'{kind} keys ({len(report[kind])}): ' +
                           ', '.join(report[kind]))


def load_with_report(module, state_dict, new_prefixes=(), logger=None,
                     min_share=None):
    """Load ``state_dict`` non-strictly with a report; refuse a checkpoint
    that provides too little of the model.

    Args:
        module (nn.Module): the model.
        state_dict (dict): weights in the model's names.
        new_prefixes (Sequence[str]): prefixes of the parameters a method adds.
        logger (MMLogger, optional): where the report goes.
        min_share (float, optional): least loaded share, in ``[0, 1]``;
            None: ``init_cfg['min_loaded_share']`` or the default.

    Returns:
        dict: the report of :func:`compare_state_dict`.

    Raises:
        ValueError: fewer than ``min_share`` load (nothing is loaded; the
            message says what the checkpoint looks like), or a bad one.
    """
    min_share = _min_share(module, min_share)
    if not isinstance(min_share, (int, float)) or not 0 <= min_share <= 1:
        raise ValueError(f'min_loaded_share must be a number in [0, 1], '
                         f'got {min_share!r}')
    report, loadable = compare_state_dict(module.state_dict(), state_dict,
                                          new_prefixes)
    share, expected = loaded_share(report)
    if share < min_share:
        raise ValueError(
            f'{type(module).__name__}: the checkpoint provides '
            f'{len(report["loaded"])} of the {expected} tensors this model '
            f'expects from it ({share:.0%}, at least {min_share:.0%} needed; '
            f'{len(report["mismatched"])} have other shapes; '
            f'{report_summary(report)}), so it is not a checkpoint of this '
            f'model. It looks like {describe_checkpoint(state_dict)}. Check '
            f'the checkpoint, or set init_cfg.min_loaded_share=0 to load it '
            f'anyway.')
    module.load_state_dict(loadable, strict=False)
    logger = logger or MMLogger.get_current_instance()
    logger.info(f'{type(module).__name__}: {report_summary(report)}')
    log_report_keys(report, logger)
    return report
