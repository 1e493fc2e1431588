"""Restore a token-pruned ViT's patch grid and build a feature pyramid, so
that a pruned DeiT serves dense heads (mmseg UperNet, mmdet FPN users).

Beyond SaiT and AS-ViT, which only classify."""
import torch.nn as nn
from mmseg.models.necks import Feature2Pyramid

from mmvitaccel.registry import MODELS
from mmvitaccel.models.token_pruning.token_pruned_vit import PrunedTokens


@MODELS.register_module()
class TokenRestoreNeck(nn.Module):
    """Scatter kept tokens back onto the full patch grid, then rescale.

    For each backbone output (a :class:`PrunedTokens` from
    ``TokenPrunedVisionTransformer(out_type='tokens')``):

    1. ``G[p] = x_k`` for the kept token ``k`` at position ``p``; a pruned
       position takes its features from the layer where it was dropped, so
       the grid is ``(B, C, H, W)`` with ``H x W`` the patch grid;
    2. the simple feature pyramid of mmseg's ``Feature2Pyramid`` (ViTDet /
       BEiT style): ``4x`` (two stride-2 deconvolutions with norm and GELU
       between), ``2x`` (one deconvolution), ``1x`` (identity), ``0.5x``
       (``0.25x``) (max pooling), one scale per input in order.

    Inputs that are already ``(B, C, H, W)`` maps pass step 1 unchanged.

    Args:
        embed_dims (int): ``C``, the backbone's width.
        rescales (Sequence[float]): one scale per input, from
            ``(4, 2, 1, 0.5)`` or ``(2, 1, 0.5, 0.25)``; mmseg's order.
        norm_cfg (dict): the norm inside the ``4x`` branch.
    """

    def __init__(self, embed_dims, rescales=(4, 2, 1, 0.5),
                 norm_cfg=dict(type='SyncBN', requires_grad=True)):
        super().__init__()
        rescales = list(rescales)
        if rescales not in ([4, 2, 1, 0.5], [2, 1, 0.5, 0.25]):
            raise ValueError('rescales must be (4, 2, 1, 0.5) or '
                             f'(2, 1, 0.5, 0.25), got {tuple(rescales)}')
        self.rescales = rescales
        self.pyramid = Feature2Pyramid(embed_dims, rescales, norm_cfg)

    @staticmethod
    def restore(feature):
        """A :class:`PrunedTokens` -> its restored ``(B, C, H, W)`` grid; a
        map is returned as it is."""
        return feature.restore() if isinstance(feature,
                                               PrunedTokens) else feature

    def forward(self, inputs):
        """Restore each input, then apply its scale.

        Args:
            inputs (Sequence[PrunedTokens | Tensor]): one per rescale.

        Returns:
            tuple[Tensor]: ``(B, C, s H, s W)`` per scale ``s``.
        """
        if len(inputs) != len(self.rescales):
            raise ValueError(f'inputs: {len(self.rescales)} backbone '
                             f'outputs expected (one per entry of rescales), '
                             f'got {len(inputs)}')
        return self.pyramid([self.restore(f) for f in inputs])
