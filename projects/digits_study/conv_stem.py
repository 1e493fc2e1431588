"""A convolutional patch stem for small-data ViT hosts.

Xiao et al., *Early Convolutions Help Transformers See Better* (NeurIPS
2021): replacing the ViT's single strided patch convolution by a few 3x3
convolutions makes optimisation easier, most of all on little data. The
study's digits host uses it (``docs/study.md``). It is a drop-in
``conv_type`` of mmcv's ``PatchEmbed`` (``patch_cfg=dict(conv_type=
'mmvitaccel.ConvStem', ...)``), so every backbone built on mmpretrain's
``VisionTransformer`` takes it unchanged and the token grid is the patch
grid of ``kernel_size = stride``.
"""
import math

import torch.nn as nn

from mmvitaccel.registry import MODELS

__all__ = ['ConvStem']


@MODELS.register_module()
class ConvStem(nn.Sequential):
    """``log2(stride)`` 3x3 stride-2 convolutions with BatchNorm and GELU,
    then a 1x1 projection: ``x -> Conv1x1(GELU(BN(Conv3x3_s2(...))))``.

    The channels double from ``out_channels / 2 ** (k - 1)`` to
    ``out_channels`` over the ``k = log2(stride)`` convolutions; the
    modules are ``[conv, bn, act] * k + [proj]``. A ``(B, C, H, W)`` input
    gives ``(B, out_channels, H / stride, W / stride)``.

    Args:
        in_channels (int): image channels.
        out_channels (int): the embedding dimension.
        kernel_size (int | tuple): must equal ``stride`` (the patch size
            whose grid this stem reproduces).
        stride (int | tuple): the patch size, a power of two >= 2.
        padding (int | tuple): must be 0 (``PatchEmbed`` pads with its
            ``padding='corner'``).
        dilation (int | tuple): must be 1.
        bias (bool): a bias in the final projection.
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride,
                 padding=0, dilation=1, bias=True):
        pair = (lambda v: tuple(v) if isinstance(v, (tuple, list)) else
                (v, v))
        k, s, p, d = pair(kernel_size), pair(stride), pair(padding), \
            pair(dilation)
        if s[0] != s[1] or s[0] < 2 or s[0] & (s[0] - 1):
            raise ValueError('stride must be a power of two >= 2, the same '
                             f'in both directions, got {stride}')
        if k != s or p != (0, 0) or d != (1, 1):
            raise ValueError('ConvStem reproduces the grid of a patch '
                             'convolution: kernel_size must equal stride, '
                             'padding be 0 and dilation 1, got kernel_size='
                             f'{kernel_size}, stride={stride}, padding='
                             f'{padding}, dilation={dilation}')
        steps = int(math.log2(s[0]))
        layers, channels = [], in_channels
        for i in range(steps):
            width = max(8, out_channels // 2**(steps - 1 - i))
            layers += [
                nn.Conv2d(channels, width, 3, 2, 1, bias=False),
                nn.BatchNorm2d(width),
                nn.GELU()
            ]
            channels = width
        layers.append(nn.Conv2d(channels, out_channels, 1, bias=bias))
        super().__init__(*layers)
        # what PatchEmbed and the method backbones read of a projection
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding, self.dilation = \
            k, s, p, d
