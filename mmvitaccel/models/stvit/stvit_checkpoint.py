"""Read the authors' STViT-R checkpoints (stvit_design.md §12)."""
import re
from collections import OrderedDict

import torch

from mmvitaccel.models.utils.checkpoint import (_backbone_only,
                                                read_state_dict,
                                                swin_state_dict)

#: a key only the authors' STViT-R layout has
AUTHORS_MARKERS = ('patch_embed.proj.0.c.weight', )

_STEM = re.compile(r'^patch_embed\.proj\.(\d+)\.(c|bn)\.(.+)$')
_SPLIT_QKV = re.compile(r'^(layers\.\d+\.blocks\.\d+\.attn)\.q\.(weight|bias)$')
_LAYER_SCALE = re.compile(r'^layers\.(\d+)\.blocks\.(\d+)\.layer_scale_(1|2)$')
_CENTRES = re.compile(r'^layers\.(\d+)\.semantic_token2$')


def is_stvit_r_authors(state_dict):
    """Whether a flat state dict is in the authors' STViT-R layout."""
    return any(k in state_dict for k in AUTHORS_MARKERS)


def stvit_r_authors_converter(state_dict):
    """The authors' STViT-R names -> ours (the rest via ``swin_converter``).

    Args:
        state_dict (dict): their weights (``layers.{i}...``, no prefix).

    Returns:
        OrderedDict: backbone weights in our names, no ``head``/``attn_mask``.

    Raises:
        ValueError: a ``q`` projection without its ``kv`` (not their layout).
    """
    last = max(int(k.split('.')[1]) for k in state_dict
               if k.startswith('layers.'))
    own, rest = OrderedDict(), OrderedDict()
    for key, value in state_dict.items():
        if key.startswith('head.') or key.endswith('attn_mask'):
            continue
        if _STEM.match(key):
            index, kind, name = _STEM.match(key).groups()
            conv = {'c': 'conv', 'bn': 'bn'}[kind]
            own[f'patch_embed.layers.{int(index) // 2}.{conv}.{name}'] = value
        elif _SPLIT_QKV.match(key):
            prefix, kind = _SPLIT_QKV.match(key).groups()
            kv_key = f'{prefix}.kv.{kind}'
            if kv_key not in state_dict:
                raise ValueError(f'{key} has no {kv_key}: not the authors\' '
                                 f'STViT-R layout')
            rest[f'{prefix}.qkv.{kind}'] = torch.cat(
                [value, state_dict[kv_key]], 0)
        elif re.search(r'\.attn\.kv\.(weight|bias)$', key):
            continue  # stacked with its q above
        elif _LAYER_SCALE.match(key):
            i, j, n = _LAYER_SCALE.match(key).groups()
            part = 'attn.gamma1' if n == '1' else 'ffn.gamma2'
            own[f'stages.{i}.blocks.{j}.{part}.weight'] = value
        elif _CENTRES.match(key):
            own[f'stages.{_CENTRES.match(key).group(1)}.global_centres.0'] = \
                value
        elif key.startswith('norm.'):
            own[f'norm{last}.' + key[len('norm.'):]] = value
        else:
            rest[key] = value
    from mmdet.models.backbones.swin import swin_converter  # mmdet extra
    out = _backbone_only(swin_converter(rest))
    out.update(own)
    return out


def stvit_r_state_dict(checkpoint):
    """Backbone weights for STViT-R-Swin from the authors' layout or any Swin.

    Args:
        checkpoint (str | dict): a path/URL or a loaded checkpoint.

    Returns:
        OrderedDict: ``{name: tensor}`` in our names, no prefix.
    """
    state_dict = read_state_dict(checkpoint)
    if is_stvit_r_authors(state_dict):
        return stvit_r_authors_converter(state_dict)
    return swin_state_dict(state_dict)
