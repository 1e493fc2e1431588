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

Loading with a report of what loaded, and the refusal of a checkpoint of
another model, are in :mod:`~mmvitaccel.models.utils.load_report`;
their names are re-exported here.
"""
from collections import OrderedDict

import torch
from mmengine.runner.checkpoint import CheckpointLoader

from mmvitaccel.models.utils.load_report import (MIN_LOADED_SHARE,
                                                 compare_state_dict,
                                                 describe_checkpoint,
                                                 load_with_report,
                                                 loaded_share, report_summary)  #noqa: F401 (re-exported)


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
        from mmdet.models.backbones.swin import swin_converter  # mmdet extra
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
