"""The modules that branch on the input size, found by walking the model, so
that a dynamic-size export is refused before the capture starts."""
from typing import Dict, List

import torch.nn as nn

_PATCH_PADDING = ('pads its input only when a side is not a multiple of the '
                  'patch')
_WINDOW_CROP = ('pads the map to whole windows and crops the padding only '
                'when there is some')

#: ``module.qualname`` of a class (or of a base class) -> its size branch
SIZE_BRANCHES: Dict[str, str] = {
    'mmcv.cnn.bricks.transformer.AdaptivePadding': _PATCH_PADDING,
    'mmdet.models.layers.transformer.utils.AdaptivePadding': _PATCH_PADDING,
    'mmseg.models.utils.embed.AdaptivePadding': _PATCH_PADDING,
    'mmaction.models.backbones.swin.PatchEmbed3D': _PATCH_PADDING,
    'mmpretrain.models.backbones.vision_transformer.VisionTransformer':
    'resizes its position embedding only when the patch grid differs from '
    'the grid it was trained on',
    'mmpretrain.models.utils.attention.ShiftWindowMSA':
    'pads the map to whole windows and, on a map of one window, drops the '
    'shift (pad_small_map)',
    'mmdet.models.backbones.swin.ShiftWindowMSA': _WINDOW_CROP,
    'mmseg.models.backbones.swin.ShiftWindowMSA': _WINDOW_CROP,
    'mmaction.models.backbones.swin.SwinTransformerBlock3D': _WINDOW_CROP,
    'mmvitaccel.models.stvit.semantic_swin_stage.SemanticSwinBlockSequence':
    'chooses gathered or whole-map region attention by the map size',
}


def _branch_of(module: nn.Module):
    for cls in type(module).__mro__:
        reason = SIZE_BRANCHES.get(f'{cls.__module__}.{cls.__qualname__}')
        if reason is not None:
            return cls.__qualname__, reason
    return None


def size_branches(model: nn.Module) -> List[str]:
    """The size branches in ``model``, one line per kind of module.

    Args:
        model (nn.Module): any model.

    Returns:
        list[str]: ``'<first name> (<class>, and N more): <branch>'``.
    """
    found = {}
    for name, module in model.named_modules():
        branch = _branch_of(module)
        if branch is not None:
            found.setdefault(branch, []).append(name or '<model>')
    lines = []
    for (cls, reason), names in found.items():
        more = f', and {len(names) - 1} more' if len(names) > 1 else ''
        lines.append(f'{names[0]} ({cls}{more}): {reason}')
    return lines


def check_dynamic_size(model: nn.Module) -> None:
    """Refuse a symbolic height and width for a model that branches on them.

    Args:
        model (nn.Module): the module to be captured.

    Raises:
        ValueError: naming every size branch (:func:`size_branches`).
    """
    branches = size_branches(model)
    if branches:
        raise ValueError(
            'dynamic height and width cannot be exported: the forward '
            'branches on the input size in ' + '; '.join(branches) +
            '. Export without --dynamic, one file per input size')
