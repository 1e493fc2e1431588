"""Helpers shared by the models built on mmpretrain's ``VisionTransformer``."""
import torch
from mmpretrain.models.utils import resize_pos_embed

from .checks import check_in_channels


def embed_tokens(vit, images):
    """``VisionTransformer``'s input stage: patch embedding, class token (if
    the model has one), position embedding resized to the patch grid,
    dropout, pre-norm, as upstream's ``forward`` runs it.

    Args:
        vit (VisionTransformer): an mmpretrain ViT (or a subclass).
        images (Tensor): ``(B, 3, H, W)`` (``in_channels`` channels; other
            counts are refused with a clear error).

    Returns:
        tuple[Tensor, tuple[int, int]]: tokens ``(B, E + N, C)`` (``E``
        extra tokens) and the patch grid ``(H / p, W / p)``.
    """
    check_in_channels(images, vit.patch_embed.projection.in_channels, 4)
    B = images.shape[0]
    x, patch_resolution = vit.patch_embed(images)
    if vit.cls_token is not None:
        x = torch.cat((vit.cls_token.expand(B, -1, -1), x), dim=1)
    x = x + resize_pos_embed(
        vit.pos_embed,
        vit.patch_resolution,
        patch_resolution,
        mode=vit.interpolate_mode,
        num_extra_tokens=vit.num_extra_tokens)
    x = vit.drop_after_pos(x)
    return vit.pre_norm(x), patch_resolution
