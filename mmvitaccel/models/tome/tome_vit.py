"""ToMe on mmpretrain's ``VisionTransformer`` (ViT, DeiT, CLIP, DINOv2 and
MAE ViTs): token merging between each layer's attention and MLP
(``docs/tome.md``)."""
import torch.nn.functional as F
from mmpretrain.models.backbones import VisionTransformer

from mmvitaccel.models.utils.archs import DEIT_ARCHS
from mmvitaccel.models.utils.vit import (FrozenStagesMixin, embed_tokens,
                                          run_layers)
from mmvitaccel.ops import is_capturing
from mmvitaccel.ops.tome import (bipartite_matching, merge_index,
                                 merge_weighted, proportional_bias,
                                 tome_r_for_flops, tome_schedule,
                                 unmerge_tokens)
from mmvitaccel.registry import MODELS

__all__ = ['ToMeVisionTransformer', 'tome_layer_forward']


def tome_layer_forward(layer, x, r, size=None, prop_attn=True,
                       class_token=True, training=False):
    """One upstream ViT layer with ToMe between attention and MLP.

    ``x' = x + gamma1(Proj(softmax(Q K^T / sqrt(d) + log s) V))``; merge
    ``r`` tokens of ``x'`` by ``mean_h(K)``; ``out = FFN(ln2(x'), x')``.

    Args:
        layer (TransformerEncoderLayer): an mmpretrain layer.
        x (Tensor): ``(B, T, C)``.
        r (int): tokens to merge.
        size (Tensor, optional): ``(B, T, 1)`` patches per token.
        prop_attn (bool): add ``log s`` to the logits (with ``size``).
        class_token (bool): token 0 is protected.
        training (bool): apply the attention dropout.

    Returns:
        tuple: ``(out (B, T - r', C), size (B, T - r', 1) | None,
        merge (TokenMerge | None))``.
    """
    mha = layer.attn
    B, T, C = x.shape
    qkv = mha.qkv(layer.ln1(x)).reshape(B, T, 3, mha.num_heads,
                                        mha.head_dims).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    bias = proportional_bias(size) if prop_attn and size is not None \
        else None
    if bias is not None and is_capturing():
        # export: the product form (SDPA with a float mask records an
        # output layout its decomposition does not keep)
        logits = (q @ k.transpose(-2, -1)) * mha.head_dims**-0.5
        context = (logits + bias.to(q.dtype)).softmax(-1) @ v
    else:
        context = F.scaled_dot_product_attention(
            q, k, v, attn_mask=None if bias is None else bias.to(q.dtype),
            dropout_p=mha.attn_drop if training else 0.)
    out = mha.proj(context.transpose(1, 2).reshape(B, T, C))
    x = x + mha.out_drop(mha.gamma1(mha.proj_drop(out)))
    merge = bipartite_matching(k.mean(1), r, class_token) if r > 0 else None
    if merge is not None:
        x, size = merge_weighted(merge, x, size)
    return layer.ffn(layer.ln2(x), identity=x), size, merge


@MODELS.register_module()
class ToMeVisionTransformer(FrozenStagesMixin, VisionTransformer):
    """A ViT whose layers merge ``r`` similar tokens each (ToMe).

    Every output has the host's shape: ``'featmap'``, ``'raw'`` and
    ``'avg_featmap'`` read the tokens unmerged (each patch takes its
    merged token's value; the average is size-weighted). With ``r = 0`` it
    is the host; ``frozen_stages`` also keeps the frozen layers in eval
    mode after ``train()``, as our other ViTs do. After a forward,
    :attr:`source_index` ``(B, E + N)`` (with ``trace_source`` or an
    unmerged output) names the token holding each input token, and
    :attr:`token_counts` the tokens entering each layer.

    Args:
        arch (str | dict): ``'deit-tiny'``/``'deit-small'``/``'deit-base'``
            (``'tiny'`` etc. read as DeiT) or a ``VisionTransformer`` arch.
        r (int | tuple | list): tokens merged a layer
            (:func:`~mmvitaccel.ops.tome.tome_schedule`): an int, ``(r,
            inflect)`` or a list; the paper's DeiT-S setting is 13.
        flops_ratio (float, optional): pick the smallest constant ``r``
            whose layers cost at most this share of the host's at
            ``img_size`` (``r`` must then be None).
        prop_attn (bool): proportional attention, ``+ log s`` on the
            logits; the authors' setting off the shelf (they leave it off
            for MAE weights and for training).
        trace_source (bool): keep :attr:`source_index` for every output.
        **kwargs: the other arguments of ``VisionTransformer``.
    """

    def __init__(self,
                 arch='deit-small',
                 r=13,
                 flops_ratio=None,
                 prop_attn=True,
                 trace_source=False,
                 **kwargs):
        if isinstance(arch, str):
            arch = DEIT_ARCHS.get(arch.lower(), arch.lower())
        for name, value in (('prop_attn', prop_attn),
                            ('trace_source', trace_source)):
            if not isinstance(value, bool):
                raise ValueError(f'{name} must be True or False, got '
                                 f'{value!r}')
        super().__init__(arch=arch, **kwargs)
        if self.num_extra_tokens > 1:
            raise ValueError(f'ToMe protects one class token; this ViT has '
                             f'{self.num_extra_tokens} extra tokens')
        for i, layer in enumerate(self.layers):
            if getattr(layer.attn, 'v_shortcut', False):
                raise ValueError(f'layer {i} has v_shortcut=True, which '
                                 f'ToMe does not support')
        if flops_ratio is not None:
            if r is not None:
                raise ValueError('give r or flops_ratio, not both (set '
                                 'r=None with flops_ratio)')
            r = tome_r_for_flops(
                flops_ratio,
                self.patch_resolution[0] * self.patch_resolution[1] +
                self.num_extra_tokens, self.num_layers, self.embed_dims,
                self.arch_settings['feedforward_channels'],
                self.arch_settings['num_heads'], self.num_extra_tokens)
        elif r is None:
            raise ValueError('give r (tokens merged a layer) or flops_ratio')
        self.schedule = tome_schedule(r, self.num_layers)
        self.r = r
        self.flops_ratio = flops_ratio
        self.prop_attn = prop_attn
        self.trace_source = trace_source
        self.source_index = None
        self.token_counts = None

    def set_r(self, r):
        """Change ``r`` (an int, ``(r, inflect)`` or a list)."""
        self.schedule = tome_schedule(r, self.num_layers)
        self.r = r

    def _unmerged(self):
        """Whether outputs read the tokens unmerged."""
        return self.out_type != 'cls_token'

    def forward(self, x):
        """Args: x (Tensor): ``(B, 3, H, W)``. Returns: tuple[Tensor]: as
        ``VisionTransformer`` with ``out_type``."""
        x, hw = embed_tokens(self, x)
        track = self.trace_source or self._unmerged()
        state = dict(size=None, index=None)
        counts = []

        def step(i, layer, x):
            r = self.schedule[i]
            counts.append(x.shape[1])
            if r <= 0 and (state['size'] is None or not self.prop_attn):
                return layer(x)
            T = x.shape[1]
            x, state['size'], merge = tome_layer_forward(
                layer, x, r, state['size'], self.prop_attn,
                self.cls_token is not None, self.training)
            if merge is not None and track:
                state['index'] = merge_index(merge, state['index'], T)
            return x

        def format_output(tokens):
            if self._unmerged():
                tokens = unmerge_tokens(tokens, state['index'])
            return self._format_output(tokens, hw)

        outs, _ = run_layers(self, x, hw, step=step,
                             format_output=format_output)
        self.source_index = state['index'] if track else None
        self.token_counts = counts
        return outs
