"""A neck restoring a token-pruned ViT's patch grid for dense heads."""
import torch.nn as nn
from mmseg.models.necks import Feature2Pyramid

from mmvitaccel.registry import MODELS
from mmvitaccel.models.token_pruning.token_pruned_vit import PrunedTokens


@MODELS.register_module()
class TokenRestoreNeck(nn.Module):
    """Scatter kept tokens back onto the patch grid, then rescale.

    ``G[p] = x_k`` for the kept token ``k`` at position ``p``, pruned
    positions from where they were dropped (``(B, C, H, W)``); then mmseg's
    ``Feature2Pyramid``, one scale per input.

    Args:
        embed_dims (int): ``C``, the backbone's width.
        rescales (Sequence[float]): one scale per input, from
            ``(4, 2, 1, 0.5)`` or ``(2, 1, 0.5, 0.25)``.
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
        """:class:`PrunedTokens` -> ``(B, C, H, W)``; a map passes as is."""
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
