"""Readers of public host checkpoints (Swin, Video Swin, DeiT/ViT, DINO)
into the names of the backbones that keep their host's names."""
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
    """The unprefixed ``backbone.`` part of a state dict; a bare one as is."""
    if any(k.startswith('backbone.') for k in state_dict):
        return OrderedDict((k[len('backbone.'):], v)
                           for k, v in state_dict.items()
                           if k.startswith('backbone.'))
    return state_dict


def swin_state_dict(checkpoint):
    """Backbone weights (no ``backbone.`` prefix) of a Swin checkpoint
    (official, mmdet/mmseg or mmpretrain layout) in mmdet's Swin names.

    Args:
        checkpoint (str | dict): a path/URL or a loaded checkpoint.
    """
    state_dict = read_state_dict(checkpoint)
    if 'patch_embed.proj.weight' in state_dict:  # official layout
        from mmdet.models.backbones.swin import swin_converter  # mmdet extra
        state_dict = swin_converter(state_dict)
    return _backbone_only(state_dict)


def video_swin_state_dict(checkpoint):
    """Backbone weights (no ``backbone.`` prefix) of a Video Swin checkpoint
    (mmaction2 or official).

    Args:
        checkpoint (str | dict): a path/URL or a loaded checkpoint.
    """
    return _backbone_only(read_state_dict(checkpoint))


def inflate_2d_swin(model, checkpoint, logger):
    """A 2-D Swin checkpoint inflated for a Video Swin ``model`` by
    mmaction2's ``SwinTransformer3D.inflate_weights``, in the model's names,
    returned, not loaded.

    Args:
        model (SwinTransformer3D): the model (or a subclass); read only.
        checkpoint (str | dict): an official 2-D Swin checkpoint (or path).
        logger (MMLogger): where upstream logs.
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

    ``blocks.{i}`` -> ``layers.{i}`` (``norm1/2`` -> ``ln1/2``, ``mlp.fc1/2``
    -> ``ffn.layers.0.0/1``), ``patch_embed.proj`` -> ``.projection``, final
    ``norm`` -> ``ln1``; the classifier (``head``, ``head_dist``) is dropped.

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
    """Backbone weights (no ``backbone.`` prefix) of a DeiT/ViT checkpoint
    (official or mmpretrain layout) in mmpretrain's ViT names.

    A distilled DeiT's ``pos_embed`` slot of ``dist_token`` (index 1) is
    removed; ``dist_token`` itself stays, reported as unused.

    Args:
        checkpoint (str | dict): a path/URL or a loaded checkpoint.
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
    """Backbone weights (no ``backbone.`` prefix) of a DINO ViT (released
    backbone or training checkpoint) in mmpretrain's ViT names.

    Args:
        checkpoint (str | dict): a path/URL or a loaded checkpoint.
        checkpoint_key (str): ``'teacher'`` (DINO's own) or ``'student'``.
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
    backbone) or a DINO training checkpoint.

    Args:
        state_dict (dict): as read by :func:`read_state_dict`.
    """
    if any(isinstance(state_dict.get(k), dict) for k in DINO_CHECKPOINT_KEYS):
        return True
    body = _backbone_only(_strip(OrderedDict(state_dict), 'module.'))
    return 'patch_embed.proj.weight' in body and 'blocks.0.attn.qkv.weight' \
        in body
