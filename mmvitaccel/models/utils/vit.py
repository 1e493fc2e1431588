"""Helpers of the models built on mmpretrain's ``VisionTransformer``: its
input stage, layer loop (a ``step`` per layer) and output formatting."""
import inspect

import numpy as np
import torch
from mmpretrain.models.backbones import VisionTransformer
from mmpretrain.models.utils import resize_pos_embed

from mmvitaccel.models.utils.checks import check_in_channels

__all__ = [
    'FrozenStagesMixin',
    'embed_tokens', 'vit_layer_cfgs', 'run_layers', 'format_vit_output',
    'upstream_layer_step'
]


class FrozenStagesMixin:
    """``frozen_stages`` for a ViT whose layers are made after upstream's
    ``__init__`` froze them: call :meth:`refreeze` once they are built;
    ``train()`` keeps the frozen part in eval mode."""

    def frozen_new_modules(self):
        """Returns: list[nn.Module]: new modules inside the frozen part."""
        return []

    def refreeze(self):
        """Freeze the first ``frozen_stages`` layers (upstream's rule) and
        :meth:`frozen_new_modules`: no gradient, eval mode."""
        if self.frozen_stages <= 0:
            return
        self._freeze_stages()
        for module in self.frozen_new_modules():
            module.eval()
            for param in module.parameters():
                param.requires_grad = False

    def train(self, mode=True):
        """Set the mode; the frozen part stays in eval mode."""
        super().train(mode)
        if mode:
            self.refreeze()
        return self


def embed_tokens(vit, images):
    """``VisionTransformer``'s input stage: patch embedding, class token,
    position embedding resized to the grid, dropout, pre-norm.

    Args:
        vit (VisionTransformer): an mmpretrain ViT (or a subclass).
        images (Tensor): ``(B, in_channels, H, W)``.

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


def vit_layer_cfgs(vit, init_kwargs):
    """The arguments upstream's ``__init__`` gives each layer: drop path
    ``linspace(0, drop_path_rate, L)[i]``, then ``layer_cfgs[i]`` on top.

    Args:
        vit (VisionTransformer): the model, built by upstream's ``__init__``.
        init_kwargs (dict): the keyword arguments given to that ``__init__``.

    Returns:
        list[dict]: one ``TransformerEncoderLayer`` keyword dict per layer.
    """
    args = inspect.signature(VisionTransformer.__init__).bind(
        vit, **init_kwargs)
    args.apply_defaults()
    cfg = args.arguments
    num = vit.num_layers
    dpr = np.linspace(0, cfg['drop_path_rate'], num)
    layer_cfgs = cfg['layer_cfgs']
    if isinstance(layer_cfgs, dict):
        layer_cfgs = [layer_cfgs] * num
    if len(layer_cfgs) < num:
        raise ValueError(f'layer_cfgs must be a dict or {num} dicts (one per '
                         f'layer), got {len(layer_cfgs)}')
    cfgs = []
    for i in range(num):
        layer_cfg = dict(
            embed_dims=vit.embed_dims,
            num_heads=vit.arch_settings['num_heads'],
            feedforward_channels=vit.arch_settings['feedforward_channels'],
            layer_scale_init_value=cfg['layer_scale_init_value'],
            drop_rate=cfg['drop_rate'],
            drop_path_rate=dpr[i],
            qkv_bias=cfg['qkv_bias'],
            norm_cfg=cfg['norm_cfg'])
        layer_cfg.update(layer_cfgs[i])
        cfgs.append(layer_cfg)
    return cfgs


def upstream_layer_step(i, layer, x):
    """The default ``step`` of :func:`run_layers`: ``layer(x)``.

    Args:
        i (int): the layer index (unused).
        layer (nn.Module): the layer.
        x (Tensor): tokens ``(B, T, C)``.
    """
    return layer(x)


def format_vit_output(vit, x, hw):
    """One backbone output from tokens by ``out_type``, through the model's
    ``_format_output`` (a subclass may override it).

    Args:
        vit (VisionTransformer): the model.
        x (Tensor): ``(B, T, C)`` tokens (after the final norm if last).
        hw (tuple[int, int]): the grid of the patch tokens.

    Returns:
        Tensor: ``(B, T, C)`` raw, ``(B, C)`` cls_token or avg_featmap,
        ``(B, C, H, W)`` featmap.
    """
    return vit._format_output(x, hw)


def run_layers(vit,
               x,
               hw,
               step=upstream_layer_step,
               format_output=None,
               stop=None,
               outputs=True):
    """``VisionTransformer.forward`` after the input stage (layers, final
    norm, outputs), bit-identical to upstream's with the default ``step``.

    Args:
        vit (VisionTransformer): the model.
        x (Tensor): embedded tokens ``(B, T, C)`` (:func:`embed_tokens`).
        hw (tuple[int, int]): the grid given to the output formatting.
        step (callable): ``step(i, layer, x) -> x``: runs layer ``i``.
        format_output (callable, optional): ``tokens -> output``; default
            :func:`format_vit_output` with ``hw``.
        stop (int, optional): run layers ``0 .. stop - 1`` only.
        outputs (bool): format the outputs (False: tokens only, a teacher).

    Returns:
        tuple[tuple, Tensor]: the outputs, and the tokens ``(B, T', C)``
        after the last layer run.
    """
    if format_output is None:
        def format_output(tokens):
            return format_vit_output(vit, tokens, hw)

    last = len(vit.layers) - 1
    outs = []
    for i, layer in enumerate(vit.layers):
        if stop is not None and i >= stop:
            break
        x = step(i, layer, x)
        if i == last and vit.final_norm:
            x = vit.ln1(x)
        if outputs and i in vit.out_indices:
            outs.append(format_output(x))
    return tuple(outs), x
