"""Load public host checkpoints into backbones that keep the host's names.

Video Swin checkpoints (mmaction2 and the official release share names)
load as they are. For 2-D Swin, three layouts are recognised and mapped to
mmdet's Swin names (which mmpretrain's Swin shares exactly):

* official Swin (microsoft): ``layers.{i}.blocks.{j}.attn.qkv``,
  ``patch_embed.proj`` ... converted with mmdet's ``swin_converter``;
* mmdet / mmseg Swin: ``backbone.stages.{i}...`` inside a detector or
  segmentor checkpoint, or bare;
* mmpretrain Swin: ``backbone.stages.{i}...`` inside a classifier.

DeiT / ViT: two layouts are recognised and mapped to mmpretrain's
``VisionTransformer`` names:

* official DeiT (facebookresearch/deit, timm): ``blocks.{i}.attn.qkv``,
  ``patch_embed.proj``, ``cls_token`` ... converted by
  :func:`deit_converter`;
* mmpretrain DeiT/ViT: ``backbone.layers.{i}...`` inside a classifier, or
  bare.

DINO's ViTs (released backbone weights or a training checkpoint) are the
official layout without a classifier: :func:`dino_state_dict`.

Loading reports four kinds of keys, so that a user sees exactly what a
checkpoint did and did not provide: *new* (parameters the method adds,
expected to be absent), *missing* (expected but absent), *unused* (in the
checkpoint, not in the model; e.g. the position tables of blocks that became
cross-attention) and *mismatched* (same name, different shape; skipped).

A checkpoint of the wrong model is refused rather than "loaded" with a
handful of tensors: when less than ``min_loaded_share`` (default
:data:`MIN_LOADED_SHARE`) of the tensors the model expects from its host
load, :func:`load_with_report` raises and names what the checkpoint appears
to be (:func:`describe_checkpoint`). ``init_cfg=dict(type='Pretrained',
checkpoint=..., min_loaded_share=0)`` opts out.
"""
from collections import OrderedDict

import torch
from mmdet.models.backbones.swin import swin_converter
from mmengine.logging import MMLogger
from mmengine.runner.checkpoint import CheckpointLoader


def _strip(state_dict, prefix):
    if all(k.startswith(prefix) for k in state_dict):
        return OrderedDict((k[len(prefix):], v) for k, v in state_dict.items())
    return state_dict


def read_state_dict(checkpoint):
    """The flat state dict of a checkpoint path or loaded checkpoint
    (``state_dict``/``model`` wrappers and a ``module.`` prefix removed)."""
    if isinstance(checkpoint, str):
        checkpoint = CheckpointLoader.load_checkpoint(
            checkpoint, map_location='cpu')
    for key in ('state_dict', 'model'):
        if key in checkpoint and isinstance(checkpoint[key], dict):
            checkpoint = checkpoint[key]
            break
    return _strip(OrderedDict(checkpoint), 'module.')


def _backbone_only(state_dict):
    """Keep the ``backbone.`` part of a whole-model state dict, unprefixed;
    a bare backbone state dict is returned as is."""
    if any(k.startswith('backbone.') for k in state_dict):
        return OrderedDict((k[len('backbone.'):], v)
                           for k, v in state_dict.items()
                           if k.startswith('backbone.'))
    return state_dict


def swin_state_dict(checkpoint):
    """Backbone weights of a Swin checkpoint, in mmdet's Swin names.

    Args:
        checkpoint (str | dict): a path/URL, or an already loaded
            checkpoint (a state dict or a dict with ``state_dict``/``model``).

    Returns:
        OrderedDict: ``{name: tensor}`` without any ``backbone.`` prefix.
    """
    state_dict = read_state_dict(checkpoint)
    if 'patch_embed.proj.weight' in state_dict:  # official layout
        state_dict = swin_converter(state_dict)
    return _backbone_only(state_dict)


def video_swin_state_dict(checkpoint):
    """Backbone weights of a Video Swin checkpoint (mmaction2, or the
    official release, which shares its names: ``layers.{i}.blocks.{j}...``).

    Args:
        checkpoint (str | dict): a path/URL, or an already loaded
            checkpoint (a state dict or a dict with ``state_dict``/``model``).

    Returns:
        OrderedDict: ``{name: tensor}`` without any ``backbone.`` prefix.
    """
    return _backbone_only(read_state_dict(checkpoint))


def inflate_2d_swin(model, checkpoint, logger):
    """A 2-D Swin checkpoint inflated for a Video Swin ``model`` by upstream
    ``SwinTransformer3D.inflate_weights`` (mmaction2), returned instead of
    loaded, so that the caller can load it with a report.

    Upstream reads ``model.pretrained`` (a file with a ``model`` entry),
    averages the patch embedding over time, resizes every relative position
    table to the window and repeats it over the ``2 * w_t - 1`` temporal
    offsets, and renames the final ``norm`` to ``norm3``. It expects every
    table of the checkpoint in the model and ``norm.*`` when the model has
    ``norm3``, so what ``model`` lacks is set aside first (the tables of
    blocks that became something else, e.g. STViT's cross-attention) and
    put back unchanged, for the loader to report as unused. The model's
    own ``relative_position_index`` buffers (computed from its window) are
    added, as upstream drops the checkpoint's.

    Args:
        model (SwinTransformer3D): the model (or a subclass); read only.
        checkpoint (str | dict): a path/URL or a loaded checkpoint of a 2-D
            Swin in the official layout (``layers.{i}.blocks.{j}...``),
            bare or under ``state_dict``/``model``.
        logger (MMLogger): where upstream logs.

    Returns:
        OrderedDict: ``{name: tensor}`` in the model's names.
    """
    import os.path as osp
    import tempfile
    from types import SimpleNamespace

    from mmaction.models.backbones.swin import SwinTransformer3D

    own = model.state_dict()
    state_dict = video_swin_state_dict(checkpoint)
    set_aside = OrderedDict(
        (k, state_dict.pop(k)) for k in list(state_dict)
        if 'relative_position_bias_table' in k and k not in own)
    inflated = OrderedDict()
    stand_in = SimpleNamespace(
        patch_size=model.patch_size,
        window_size=model.window_size,
        state_dict=lambda: own,
        load_state_dict=lambda sd, strict=True: inflated.update(sd))
    if hasattr(model, 'norm3') and 'norm.weight' in state_dict:
        stand_in.norm3 = model.norm3
    with tempfile.TemporaryDirectory() as folder:
        stand_in.pretrained = osp.join(folder, 'swin2d.pth')
        torch.save(dict(model=state_dict), stand_in.pretrained)
        SwinTransformer3D.inflate_weights(stand_in, logger)
    inflated.update(set_aside)
    inflated.update((k, v) for k, v in own.items()
                    if 'relative_position_index' in k)
    return inflated


#: official DeiT block names -> mmpretrain ``TransformerEncoderLayer`` names
_DEIT_BLOCK_RENAMES = (
    ('.norm1.', '.ln1.'),
    ('.norm2.', '.ln2.'),
    ('.mlp.fc1.', '.ffn.layers.0.0.'),
    ('.mlp.fc2.', '.ffn.layers.1.'),
    ('.gamma_1', '.attn.gamma1.weight'),  # layer scale (DeiT III)
    ('.gamma_2', '.ffn.gamma2.weight'),
)

#: official DeiT top-level names -> mmpretrain ``VisionTransformer`` names
_DEIT_TOP_RENAMES = (
    ('patch_embed.proj.', 'patch_embed.projection.'),
    ('norm.', 'ln1.'),  # final norm
    ('fc_norm.', 'ln2.'),  # norm after global average pooling
)


def deit_converter(state_dict):
    """Official DeiT (facebookresearch/deit, timm) names -> mmpretrain's.

    ``blocks.{i}.{norm1,attn.qkv,attn.proj,norm2,mlp.fc1,mlp.fc2}`` become
    ``layers.{i}.{ln1,attn.qkv,attn.proj,ln2,ffn.layers.0.0,ffn.layers.1}``,
    ``patch_embed.proj`` becomes ``patch_embed.projection``, the final
    ``norm`` ``ln1``; ``cls_token``, ``pos_embed`` (and a distilled model's
    ``dist_token``) keep their names. The classifier (``head``,
    ``head_dist``) is dropped. mmpretrain ships the same mapping only as a
    script (``tools/model_converters/deit3_to_mmpretrain.py``), which is not
    importable; the tests check that both agree.

    Args:
        state_dict (dict): official DeiT weights.

    Returns:
        OrderedDict: backbone weights in mmpretrain's names, no prefix.
    """
    out = OrderedDict()
    for key, value in state_dict.items():
        if key.startswith(('head.', 'head_dist.')):
            continue
        if key.startswith('blocks.'):
            key = 'layers.' + key[len('blocks.'):]
            for old, new in _DEIT_BLOCK_RENAMES:
                key = key.replace(old, new)
        else:
            for old, new in _DEIT_TOP_RENAMES:
                if key.startswith(old):
                    key = new + key[len(old):]
                    break
        out[key] = value
    return out


def deit_state_dict(checkpoint):
    """Backbone weights of a DeiT/ViT checkpoint, in mmpretrain's
    ``VisionTransformer`` names.

    A distilled DeiT's position embedding has a slot for its distillation
    token (index 1, after the class token); that slot is removed so that
    the embedding fits a model with one class token. ``dist_token`` itself
    is kept, and a loader reports it as unused.

    Args:
        checkpoint (str | dict): a path/URL, or an already loaded
            checkpoint (a state dict or a dict with ``state_dict``/``model``)
            in the official or the mmpretrain layout.

    Returns:
        OrderedDict: ``{name: tensor}`` without any ``backbone.`` prefix.
    """
    state_dict = read_state_dict(checkpoint)
    if 'patch_embed.proj.weight' in state_dict:  # official layout
        state_dict = deit_converter(state_dict)
    state_dict = _backbone_only(state_dict)
    if 'dist_token' in state_dict and 'pos_embed' in state_dict:
        pos_embed = state_dict['pos_embed']
        state_dict['pos_embed'] = torch.cat(
            [pos_embed[:, :1], pos_embed[:, 2:]], dim=1)
    return state_dict


#: entries of a DINO training checkpoint that hold a network's weights
DINO_CHECKPOINT_KEYS = ('teacher', 'student')


def dino_state_dict(checkpoint, checkpoint_key='teacher'):
    """Backbone weights of a DINO ViT (facebookresearch/dino), in
    mmpretrain's ``VisionTransformer`` names.

    DINO's ViT is timm's without a classifier, so its released backbone
    weights (e.g. ViT-S/16) are a plain state dict in the official DeiT
    layout with no ``head.*``: :func:`deit_converter` maps them. A DINO
    training checkpoint holds the two networks under ``teacher`` and
    ``student``, each ``module.backbone.*`` plus the projection head
    ``module.head.*`` (not part of the ViT, dropped); ``checkpoint_key``
    picks one, the teacher by default, as DINO's own evaluations do.

    Args:
        checkpoint (str | dict): a path/URL or a loaded checkpoint.
        checkpoint_key (str): ``'teacher'`` or ``'student'``, used when the
            checkpoint is a training checkpoint.

    Returns:
        OrderedDict: ``{name: tensor}`` without any ``backbone.`` prefix.
    """
    if checkpoint_key not in DINO_CHECKPOINT_KEYS:
        raise ValueError(f'checkpoint_key must be one of '
                         f'{DINO_CHECKPOINT_KEYS}, got {checkpoint_key!r}')
    if isinstance(checkpoint, str):
        checkpoint = CheckpointLoader.load_checkpoint(
            checkpoint, map_location='cpu')
    if isinstance(checkpoint.get(checkpoint_key), dict):
        checkpoint = checkpoint[checkpoint_key]
    state_dict = OrderedDict(
        (k, v) for k, v in read_state_dict(checkpoint).items()
        if not k.startswith('head.'))  # DINO's projection head
    return deit_state_dict(_backbone_only(state_dict))


def is_official_vit(state_dict):
    """Whether a state dict is a timm-layout ViT (official DeiT, DINO's
    released backbone) or a DINO training checkpoint.

    Args:
        state_dict (dict): as read by :func:`read_state_dict`.

    Returns:
        bool
    """
    if any(isinstance(state_dict.get(k), dict) for k in DINO_CHECKPOINT_KEYS):
        return True
    body = _backbone_only(_strip(OrderedDict(state_dict), 'module.'))
    return 'patch_embed.proj.weight' in body and 'blocks.0.attn.qkv.weight' \
        in body


#: the least share of a model's expected tensors a checkpoint must provide
MIN_LOADED_SHARE = 0.5

#: (keys that must all be present, description), first match wins; keys are
#: looked up after a ``backbone.`` prefix is removed
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
    ``own``.

    Args:
        own (dict): the model's ``{name: tensor}``.
        state_dict (dict): the checkpoint's, in the model's names.
        new_prefixes (Sequence[str]): name prefixes of the parameters a
            method adds (not expected in a host checkpoint).

    Returns:
        tuple[dict, OrderedDict]: the report (key lists ``loaded``, ``new``,
        ``missing``, ``unused``, ``mismatched``) and the loadable tensors.
    """
    loadable = OrderedDict()
    report = dict(loaded=[], new=[], missing=[], unused=[], mismatched=[])
    for key, value in state_dict.items():
        if key not in own:
            report['unused'].append(key)
        elif own[key].shape != getattr(value, 'shape', None):
            report['mismatched'].append(
                f'{key}: checkpoint {tuple(getattr(value, "shape", ()))}, '
                f'model {tuple(own[key].shape)}')
        else:
            loadable[key] = value
            report['loaded'].append(key)
    for key in own:
        if key not in loadable:
            kind = 'new' if key.startswith(tuple(new_prefixes)) else 'missing'
            report[kind].append(key)
    return report, loadable


def loaded_share(report):
    """The share of the expected tensors (all but the new ones) a report of
    :func:`compare_state_dict` loaded, and how many were expected."""
    expected = len(report['loaded']) + len(report['missing']) + len(
        report['mismatched'])
    return (len(report['loaded']) / expected if expected else 1.0), expected


def load_with_report(module, state_dict, new_prefixes=(), logger=None,
                     min_share=None):
    """Load ``state_dict`` non-strictly and report what happened; refuse a
    checkpoint that provides too little of the model.

    Args:
        module (nn.Module): the model.
        state_dict (dict): weights in the model's names.
        new_prefixes (Sequence[str]): name prefixes of parameters the
            method adds (not expected in a checkpoint of the host).
        logger (MMLogger, optional): where the report goes.
        min_share (float, optional): the least share of the expected
            tensors (all but the new ones) that must load, in ``[0, 1]``;
            None: ``module.init_cfg['min_loaded_share']`` if given, else
            :data:`MIN_LOADED_SHARE`.

    Returns:
        dict: lists of keys under ``loaded``, ``new``, ``missing``,
        ``unused`` and ``mismatched``.

    Raises:
        ValueError: when fewer than ``min_share`` of the expected tensors
            load (nothing is loaded then), naming what the checkpoint
            appears to be; or for a ``min_share`` outside ``[0, 1]``.
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
            f'{len(report["mismatched"])} have other shapes), so it is not '
            f'a checkpoint of this model. It looks like '
            f'{describe_checkpoint(state_dict)}. Check the checkpoint, or '
            f'set init_cfg.min_loaded_share=0 to load it anyway.')
    module.load_state_dict(loadable, strict=False)
    logger = logger or MMLogger.get_current_instance()
    logger.info(f'{type(module).__name__}: loaded {len(report["loaded"])} '
                f'tensors from the checkpoint')
    for kind in ('new', 'missing', 'unused', 'mismatched'):
        if report[kind]:
            logger.warning(f'{kind} keys ({len(report[kind])}): ' +
                           ', '.join(report[kind]))
    return report
