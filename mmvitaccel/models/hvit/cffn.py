"""cFFN on upstream FFNs: ``M2`` (mmcv ``FFN``'s ``layers.1``, mmdet
``MixFFN``'s ``layers.4``) -> :class:`~mmvitaccel.ops.CompactLinear`."""
import torch.nn as nn

from mmvitaccel.ops import CompactLinear

__all__ = ['compact_ffn']


def compact_ffn(ffn, ratio=0.5, branches=2, deploy=False):
    """Replace ``M2`` of an upstream FFN by ``U V`` (cFFN), in place.

    Args:
        ffn (nn.Module): mmcv ``FFN`` or mmdet ``MixFFN``.
        ratio (float): Compact ratio ``t``; ``k = t m C / (m + 1)``.
        branches (int): ``r`` (1x1 conv + BN) branches per factor.
        deploy (bool): Build the folded form.

    Returns:
        CompactLinear: The new module (``ffn.layers[i]``).
    """
    layers = getattr(ffn, 'layers', None)
    if not isinstance(layers, nn.Sequential):
        raise ValueError(f'ffn: cFFN needs an FFN with a `layers` '
                         f'Sequential (mmcv FFN or mmdet MixFFN), got '
                         f'{type(ffn)}')
    # the last linear / 1x1 conv is M2
    index = max((i for i, m in enumerate(layers)
                 if isinstance(m, (nn.Linear, nn.Conv2d))), default=None)
    if index is None:
        raise ValueError(f'ffn: cFFN found no linear layer to factor in '
                         f'{type(ffn).__name__}.layers')
    old = layers[index]
    if isinstance(old, nn.Linear):
        hidden, out, dim = old.in_features, old.out_features, -1
    elif old.kernel_size == (1, 1) and old.groups == 1:
        hidden, out, dim = old.in_channels, old.out_channels, 1
    else:
        raise ValueError(f'ffn: the last layer of the FFN is not a linear '
                         f'map: {old}')
    if index == 0 or hidden <= out:
        raise ValueError(f'ffn: cFFN factors the hidden-to-output '
                         f'projection of an expanding FFN (mC -> C), got '
                         f'{old}')
    layers[index] = CompactLinear(hidden, out, ratio, branches, deploy, dim)
    return layers[index]
