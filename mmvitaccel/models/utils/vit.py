"""Helpers shared by the models built on mmpretrain's ``VisionTransformer``.

``VisionTransformer.forward`` is three stages: the input stage
(:func:`embed_tokens`), the layer loop with the final norm on the last layer
and one formatted output per ``out_indices`` (:func:`run_layers`,
:func:`format_vit_output`). A backbone that changes what happens at a layer
(a mask in its softmax, tokens merged before it, ...) passes a ``step`` to
:func:`run_layers` instead of copying the loop, so that the final norm and
the outputs follow upstream's conventions in one place.
"""
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
    """``frozen_stages`` for a ViT whose layers or new modules are made after
    upstream's ``__init__`` froze its stages: a method's backbone calls
    :meth:`refreeze` once it has built them, and ``train()`` keeps the
    frozen part in eval mode (upstream freezes once, in ``__init__``, so a
    later ``.train()`` would let its dropout and norms move).

    :meth:`frozen_new_modules` names a method's own modules that sit in the
    frozen part (none by default).
    """

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
        """Args: mode (bool). Returns: the module, its frozen part in eval
        mode."""
        super().train(mode)
        if mode:
            self.refreeze()
        return self


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


def vit_layer_cfgs(vit, init_kwargs):
    """The arguments ``VisionTransformer.__init__`` gives each of its
    ``TransformerEncoderLayer``: the model's width, heads and FFN channels,
    layer scale, dropout, qkv bias and norm, a drop path rate growing
    linearly from 0 to ``drop_path_rate`` over the layers, then the layer's
    own ``layer_cfgs`` entry on top. A backbone that replaces upstream's
    layers by subclasses builds them from these, so that they get exactly
    what upstream's would have.

    Args:
        vit (VisionTransformer): the model, already built by
            ``VisionTransformer.__init__`` (``num_layers``, ``embed_dims``
            and ``arch_settings`` are read from it).
        init_kwargs (dict): the keyword arguments that were given to
            ``VisionTransformer.__init__`` (``arch`` and the others; missing
            ones take upstream's defaults).

    Returns:
        list[dict]: ``num_layers`` keyword dicts for
        ``TransformerEncoderLayer`` (or a subclass).
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
        x (Tensor): its input tokens ``(B, T, C)``.

    Returns:
        Tensor: its output ``(B, T', C)``.
    """
    return layer(x)


def format_vit_output(vit, x, hw):
    """One backbone output from tokens, by the model's ``out_type``, with
    the model's own ``_format_output`` (upstream's: ``'raw'`` the tokens
    ``(B, T, C)``, ``'cls_token'`` ``x[:, 0]`` ``(B, C)``, ``'featmap'`` the
    patch tokens as ``(B, C, H, W)``, ``'avg_featmap'`` ``ln2`` of their
    mean ``(B, C)``; a subclass may override it, e.g. for tokens that are no
    longer the patch grid).

    Args:
        vit (VisionTransformer): the model.
        x (Tensor): ``(B, T, C)`` tokens, after the final norm when they
            are the last layer's.
        hw (tuple[int, int]): the grid the patch tokens lie on.

    Returns:
        Tensor: the output (shape by ``out_type``, see above).
    """
    return vit._format_output(x, hw)


def run_layers(vit,
               x,
               hw,
               step=upstream_layer_step,
               format_output=None,
               stop=None,
               outputs=True):
    """``VisionTransformer.forward`` after the input stage: each layer in
    turn, the final norm ``ln1`` on the last layer's output when
    ``final_norm``, and after each layer in ``out_indices`` its formatted
    output. With the default ``step`` this is upstream's loop exactly (the
    same operations in the same order, so bit-identical outputs).

    Args:
        vit (VisionTransformer): the model (``layers``, ``final_norm``,
            ``ln1``, ``out_indices`` are read from it).
        x (Tensor): embedded tokens ``(B, T, C)`` (:func:`embed_tokens`).
        hw (tuple[int, int]): the grid given to the output formatting.
        step (callable): ``step(i, layer, x) -> x`` runs layer ``i`` on
            ``x`` ``(B, T, C)`` and returns ``(B, T', C)``; a method puts
            what it does around a layer here (tokens merged or pruned before
            it, attention kept, ...). Default: ``layer(x)``.
        format_output (callable, optional): ``format_output(x) -> output``
            for the layers in ``out_indices``; default
            :func:`format_vit_output` with ``hw``.
        stop (int, optional): run layers ``0 .. stop - 1`` only (the final
            norm only comes with the last layer); default all.
        outputs (bool): format the ``out_indices`` outputs; False when only
            the tokens are wanted (a teacher).

    Returns:
        tuple[tuple, Tensor]: one output per ``out_indices`` layer that ran,
        and the tokens after the last layer run ``(B, T', C)`` (after the
        final norm when that is the model's last layer).
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
