"""Integrated-DeiT: DGSSA in the early layers, a GLAD token pyramid after
(``docs/dgssa_glad_design.md``); GLADs mix the patch tokens only."""
import math

import torch
import torch.nn as nn
from mmpretrain.models.backbones import VisionTransformer

from mmvitaccel.ops import (GLAD, check_init_mode, init_static_logits,
                            resize_static_logits, token_counts)
from mmvitaccel.registry import MODELS
from mmvitaccel.models.dgssa.static_attention import StaticMultiheadAttention
from mmvitaccel.models.dgssa.static_checkpoint import (fresh_static_init,
                                                       static_attention_state_dict)
from mmvitaccel.models.utils import PretrainedMixin, deit_state_dict
from mmvitaccel.models.utils.vit import (FrozenStagesMixin, embed_tokens,
                                         run_layers)
from mmvitaccel.models.utils.archs import DEIT_ARCHS


def check_layers(static_layers, glad_layers, glad_tokens, num_layers,
                 num_tokens, extra_tokens):
    """Raise a clear ``ValueError`` unless the DGSSA/GLAD layout is valid."""
    for name, layers in (('static_layers', static_layers),
                         ('glad_layers', glad_layers)):
        if any(not 0 <= i < num_layers for i in layers) or \
                len(set(layers)) != len(layers):
            raise ValueError(f'{name} must be distinct layer indices in '
                             f'0..{num_layers - 1}, got {tuple(layers)}')
    if list(glad_layers) != sorted(glad_layers):
        raise ValueError(f'glad_layers must increase, got {glad_layers}')
    if len(glad_layers) != len(glad_tokens):
        raise ValueError(f'{len(glad_layers)} glad_layers but '
                         f'{len(glad_tokens)} glad_tokens')
    prev = num_tokens
    for m in glad_tokens:
        if not extra_tokens < m < prev:
            raise ValueError(
                f'glad_tokens must decrease from the {num_tokens} input '
                f'tokens ({extra_tokens} class token(s) included, and at '
                f'least one patch token kept), got {tuple(glad_tokens)}')
        prev = m


@MODELS.register_module()
class DGSSAVisionTransformer(PretrainedMixin, FrozenStagesMixin,
                             VisionTransformer):
    """DeiT/ViT with DGSSA layers and a GLAD token pyramid.

    * before layer ``l`` in ``glad_layers``: ``x = [cls; GELU(LN(W_l
      x_patch)) + E_l]``, ``W_l`` ``(m_l - 1) x (n - 1)``;
    * layer ``l`` in ``static_layers``: ``Proj(softmax(S_l) . V)``, ``S_l``
      ``(h, n_l, n_l)``, instead of ``softmax(Q K^T / sqrt(d_h))``;
    * every other layer is upstream's ``TransformerEncoderLayer``.

    Args:
        arch (str | dict): ``'deit-tiny'``/``'deit-small'``/``'deit-base'``
            (or ``'tiny'`` etc.), a ``VisionTransformer`` arch, or a dict.
        static_layers (Sequence[int]): 0-based DGSSA layers; paper ``(1, 2)``.
        static_init (str): ``'dg'`` (from ``tools/dgssa_init.py``),
            ``'random'``, ``'uniform'`` or ``'local'``.
        glad_layers (Sequence[int]): 0-based layers that start with a GLAD.
        glad_tokens (Sequence[int]): decreasing token count after each GLAD,
            class token included.
        glad_init (str): ``W`` init of the GLADs, ``'pool'`` or ``'random'``.
        **kwargs: ``VisionTransformer``'s (``img_size`` fixes the tokens).
    """

    def __init__(self,
                 arch='deit-small',
                 static_layers=(1, 2),
                 static_init='dg',
                 glad_layers=(3, 5, 7),
                 glad_tokens=(127, 77, 35),
                 glad_init='pool',
                 **kwargs):
        if isinstance(arch, str):
            arch = DEIT_ARCHS.get(arch.lower(), arch.lower())
        check_init_mode(static_init)
        if kwargs.get('out_type') == 'featmap' and glad_layers:
            raise ValueError("out_type='featmap' needs the patch grid, which "
                             'GLAD replaces; use cls_token, avg_featmap or '
                             'raw')
        super().__init__(arch=arch, **kwargs)
        extra = self.num_extra_tokens
        n0 = extra + math.prod(self.patch_resolution)
        static_layers, glad_layers = list(static_layers), list(glad_layers)
        glad_tokens = list(glad_tokens)
        check_layers(static_layers, glad_layers, glad_tokens,
                     self.num_layers, n0, extra)
        self.static_layers = static_layers
        self.static_init = static_init
        self.glad_layers = glad_layers
        self.glad_tokens = glad_tokens
        self.tokens = token_counts(n0, self.num_layers, glad_layers,
                                   glad_tokens)
        for i in static_layers:
            layer = self.layers[i]
            layer.attn = StaticMultiheadAttention.from_dynamic(
                layer.attn, self.tokens[i])
        before = [n0] + glad_tokens[:-1]
        self.glads = nn.ModuleList(
            GLAD(n - extra, m - extra, self.embed_dims, glad_init)
            for n, m in zip(before, glad_tokens))
        self._glad_index = {l: k for k, l in enumerate(glad_layers)}
        # silently uniform for 'dg' until init_weights loads the logits
        self.reset_static_logits(
            'uniform' if static_init == 'dg' else None)
        self.refreeze()  # upstream froze the layers before they changed

    def frozen_new_modules(self):
        """The GLADs that feed a frozen layer.

        Returns:
            list[GLAD]: those before layer ``l < frozen_stages``.
        """
        return [self.glads[k] for l, k in self._glad_index.items()
                if l < self.frozen_stages]

    def reset_static_logits(self, mode=None):
        """Static logits by ``mode`` (default ``static_init``)."""
        mode = fresh_static_init(mode or self.static_init)
        side = self.patch_resolution
        for i in self.static_layers:
            attn = self.layers[i].attn
            grid = side if attn.num_tokens == self.tokens[0] else None
            if mode == 'local' and grid is None:
                raise ValueError(f"'local' init needs the patch grid; layer "
                                 f'{i} runs on GLAD tokens')
            with torch.no_grad():
                attn.static_logits.copy_(
                    init_static_logits(mode, attn.num_heads, attn.num_tokens,
                                       grid, self.num_extra_tokens))

    #: reads a host (DeiT/ViT) checkpoint in any supported layout
    host_state_dict = staticmethod(deit_state_dict)

    #: the GLADs have no counterpart in a host checkpoint
    new_parameter_prefixes = ('glads.', )

    def convert_host_state_dict(self, state_dict):
        """DeiT state dict -> this model's names
        (:func:`~mmvitaccel.models.dgssa.static_attention_state_dict`).

        Args:
            state_dict (dict): DeiT weights in mmpretrain's names.

        Returns:
            tuple[dict, list[str], OrderedDict]: the state dict, notes, and
            the static logits to initialise here.
        """
        return static_attention_state_dict(
            state_dict,
            {f'layers.{i}.attn.': self.layers[i].attn
             for i in self.static_layers},
            self.static_init,
            qk_note='{key}: Q and K rows dropped (DGSSA layer), V rows -> '
            '{v_key}')

    def adapt_host_state_dict(self, state_dict):
        """Resize the position embedding, then
        :meth:`convert_host_state_dict`.

        Args:
            state_dict (dict): DeiT weights in mmpretrain's names.

        Returns:
            tuple[dict, OrderedDict, list[str]]: see
            :meth:`PretrainedMixin.adapt_host_state_dict`.
        """
        self._prepare_pos_embed(state_dict, prefix='')
        resized = self._resize_to_grid(state_dict)
        state_dict, notes, fresh = self.convert_host_state_dict(state_dict)
        return state_dict, fresh, resized + notes

    def _resize_to_grid(self, state_dict):
        """Resize on-grid static logits to this grid; refuse GLAD sizes.

        Args:
            state_dict (dict): the checkpoint in this model's names.
        """
        notes = []
        for name, param in self.named_parameters():
            got = state_dict.get(name)
            if got is None or got.shape == param.shape:
                continue
            layer = int(name.split('.')[1]) if name.startswith('layers.') \
                else None
            on_grid = layer is not None and name.endswith('static_logits') \
                and self.tokens[layer] == self.tokens[0]
            if not on_grid and (name.startswith('glads.') or
                                name.endswith('static_logits')):
                raise ValueError(
                    f'{name} is {tuple(got.shape)} in the checkpoint and '
                    f'{tuple(param.shape)} here: GLAD counts tokens, so a '
                    'model with GLAD loads only at the img_size it was '
                    'trained at; build it at that size, or start from the '
                    'host (DeiT) checkpoint at this size (tools/dgssa_init.py '
                    'writes its static logits)')
            if on_grid:
                state_dict[name] = resize_static_logits(
                    got, self.num_extra_tokens, self.patch_resolution)
                notes.append(f'{name}: resized from {tuple(got.shape)} to '
                             f'{tuple(param.shape)} (patch grid '
                             f'{tuple(self.patch_resolution)})')
        return notes

    def init_new_parameters(self, fresh=None):
        """GLADs by ``glad_init``; static logits by ``static_init``.

        Args:
            fresh (Collection[str] | None): static logits the checkpoint
                lacks, or None from scratch.
        """
        for glad in self.glads:
            glad.reset_parameters()
        if fresh is None or fresh:
            self.reset_static_logits()

    def forward_with_glad(self, x):
        """Forward that also returns the GLAD outputs (token distillation).

        Args:
            x (Tensor): images ``(B, 3, H, W)`` at ``img_size``.

        Returns:
            tuple[tuple[Tensor], list[Tensor]]: the backbone outputs (one per
            ``out_indices``) and each GLAD's ``Y`` ``(B, m_l - 1, d)``.
        """
        x, patch_resolution = embed_tokens(self, x)
        if tuple(patch_resolution) != tuple(self.patch_resolution):
            raise ValueError(
                f'DGSSA/GLAD are built for the {self.patch_resolution} patch '
                f'grid of img_size {self.img_size}, got {patch_resolution}')
        e = self.num_extra_tokens
        glad_outs = []

        def step(i, layer, x):
            if i in self._glad_index:  # x = [cls; GLAD(x_patch)]
                y = self.glads[self._glad_index[i]](x[:, e:])
                glad_outs.append(y)
                x = torch.cat((x[:, :e], y), dim=1)
            return layer(x)

        outs, _ = run_layers(self, x, patch_resolution, step=step)
        return outs, glad_outs

    def forward(self, x):
        """Args:
            x (Tensor): images ``(B, 3, H, W)`` at ``img_size``.

        Returns:
            tuple[Tensor]: one output per ``out_indices`` by ``out_type``.
        """
        return self.forward_with_glad(x)[0]
