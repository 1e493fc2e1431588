"""Read the authors' released STViT-R checkpoints into our STViT-R-Swin.

The authors' classification code is the official Swin code with its stage
3 rebuilt; their checkpoints (``STViT-R-Swin-S.pth``, ``STViT-R-Swin-B.pth``)
therefore use the official Swin names plus these (``i`` a stage, ``j`` a
block):

* ``patch_embed.proj.{0,2}.c.weight`` and ``patch_embed.proj.{0,2}.bn.*``:
  the convolutional stem (conv + batch norm, twice);
* ``layers.{i}.blocks.{j}.attn.q.*`` and ``attn.kv.*``: the query and the
  fused key/value projections of their cross-attention blocks (STGM,
  semantic, recovery), where Swin has one ``attn.qkv``;
* ``layers.{i}.blocks.{j}.layer_scale_1`` / ``layer_scale_2``: layer
  scale of the same blocks;
* ``layers.{i}.semantic_token2``: the global centres ``G`` when trained
  with them, ``(1, L, C)`` over the semantic grid of a 224 px image;
* ``layers.{i}.blocks.{j}.attn_mask``: the shift masks of the official
  Swin blocks (buffers computed from the geometry, not weights);
* ``norm.*``: the norm after the last stage; ``head.*``: the classifier.

:func:`stvit_r_authors_converter` maps them onto
:class:`~mmvitaccel.models.STViTRSwinTransformer` built with
``stem='conv'`` and ``layer_scale`` (``configs/
stvit_r_swin_s_authors_in1k.py``): ``q`` and ``kv`` are stacked into
``attn.w_msa.qkv`` (rows ``[:C]`` queries, ``[C:]`` keys then values, the
order our cross-attention reads), layer scales become ``attn.gamma1.weight``
and ``ffn.gamma2.weight``, the stem ``patch_embed.layers.{0,1}.{conv,bn}``,
``norm`` the last stage's ``norm{i}``, ``semantic_token2``
``stages.{i}.global_centres.0``; every other key goes through mmdet's
``swin_converter`` (official Swin -> mmdet names, patch merging reordered).
"""
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
    """The authors' STViT-R names -> our STViT-R-Swin names.

    Args:
        state_dict (dict): their weights (``layers.{i}...``, no prefix).

    Returns:
        OrderedDict: backbone weights in our names, no prefix; ``head.*``
        and the ``attn_mask`` buffers are dropped.

    Raises:
        ValueError: a ``q`` projection without its ``kv`` (not their
            layout).
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
    """Backbone weights for STViT-R-Swin: the authors' STViT-R layout
    (:func:`stvit_r_authors_converter`) or any Swin layout
    (:func:`~mmvitaccel.models.utils.swin_state_dict`).

    Args:
        checkpoint (str | dict): a path/URL or a loaded checkpoint.

    Returns:
        OrderedDict: ``{name: tensor}`` in our names, no prefix.
    """
    state_dict = read_state_dict(checkpoint)
    if is_stvit_r_authors(state_dict):
        return stvit_r_authors_converter(state_dict)
    return swin_state_dict(state_dict)
