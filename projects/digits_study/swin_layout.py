"""A 2-D Swin in OpenMMLab names written back in the official layout.

mmaction2's Video Swin inflates a 2-D Swin checkpoint in the official
(microsoft) layout only (``SwinTransformer3D.inflate_weights`` reads
``layers.{i}.blocks.{j}.attn.relative_position_bias_table``,
``patch_embed.proj.weight`` and ``norm.*``). A Swin trained with mmpretrain,
or fine-tuned inside an mmdet or mmseg model, has mmdet's names
(``stages.{i}.blocks.{j}.attn.w_msa...``), which mmdet's ``swin_converter``
makes from the official ones. :func:`swin_to_official` is its inverse, so
that such a Swin inflates as upstream inflates an ImageNet one.
"""
from collections import OrderedDict

from mmvitaccel.models.utils.checkpoint import _backbone_only, read_state_dict

__all__ = ['swin_to_official']

#: the order of the four 2x2 neighbours in a patch merging's unfolded
#: channels: mmcv's ``PatchMerging`` (``nn.Unfold``) against the official
#: concatenation ``x0, x1, x2, x3``; the permutation is its own inverse
_MERGE_ORDER = [0, 2, 1, 3]

#: mmdet's name parts -> the official ones, inside a block
_BLOCK_NAMES = (
    ('attn.w_msa.', 'attn.'),
    ('ffn.layers.0.0.', 'mlp.fc1.'),
    ('ffn.layers.1.', 'mlp.fc2.'),
)


def _official_reduction(weight):
    """A patch merging's reduction ``(C_out, 4 C)`` with its input channels
    from mmcv's unfold order (channel-major: ``c * 4 + k``) back to the
    official neighbour-major order (``k' * C + c``)."""
    out_channels, in_channels = weight.shape
    weight = weight.reshape(out_channels, in_channels // 4, 4)
    weight = weight.transpose(1, 2)[:, _MERGE_ORDER, :]
    return weight.reshape(out_channels, in_channels)


def _official_merge_norm(vector):
    """The same channel reorder for the merging's LayerNorm ``(4 C, )``."""
    vector = vector.reshape(vector.shape[0] // 4, 4)
    return vector.transpose(0, 1)[_MERGE_ORDER, :].reshape(-1)


def swin_to_official(checkpoint, final_norm='norm3'):
    """A 2-D Swin backbone in mmdet's (= mmpretrain's) names, in the
    official layout: the inverse of mmdet's ``swin_converter``.

    Renames ``stages.`` to ``layers.``, ``attn.w_msa.`` to ``attn.``, the FFN
    to ``mlp.fc1`` / ``mlp.fc2`` and ``patch_embed.projection`` to
    ``patch_embed.proj``; reorders the patch mergings' input channels back
    (mmcv's unfold order is channel-major); the output norm
    ``final_norm`` (mmpretrain's and mmdet's ``norm3`` after the last stage)
    becomes ``norm``. The other output norms (``norm0``-``norm2`` of a
    detector's backbone) have no official place and are dropped, as the
    buffers ``relative_position_index`` (the model computes them).

    Args:
        checkpoint (str | dict): a path or a loaded checkpoint: a classifier,
            detector or segmentor (``backbone.*`` is taken) or a bare
            backbone state dict.
        final_norm (str): the norm that becomes the official ``norm``.

    Returns:
        OrderedDict: ``{official name: tensor}``.

    Raises:
        ValueError: the checkpoint has no Swin in mmdet's names.
    """
    state_dict = _backbone_only(read_state_dict(checkpoint))
    if not any(k.startswith('stages.') for k in state_dict):
        raise ValueError(
            'swin_to_official reads a Swin in mmdet/mmpretrain names '
            "('stages.{i}.blocks.{j}...'); got keys like "
            f'{sorted(state_dict)[:3]}')
    out = OrderedDict()
    for key, value in state_dict.items():
        if key.endswith('relative_position_index'):
            continue
        if key.startswith('stages.'):
            key = 'layers.' + key[len('stages.'):]
            for ours, official in _BLOCK_NAMES:
                key = key.replace(ours, official)
            if '.downsample.reduction.' in key:
                value = _official_reduction(value)
            elif '.downsample.norm.' in key:
                value = _official_merge_norm(value)
        elif key.startswith('patch_embed.projection.'):
            key = key.replace('projection.', 'proj.', 1)
        elif key.startswith(final_norm + '.'):
            key = 'norm.' + key[len(final_norm) + 1:]
        elif key.startswith('norm'):
            continue
        out[key] = value
    return out
