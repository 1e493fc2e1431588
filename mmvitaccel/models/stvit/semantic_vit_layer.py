"""A ViT encoder layer whose queries attend to another set of tokens.

STViT-DeiT's STGM layers are ordinary DeiT layers whose queries (cluster
centres or semantic tokens) and keys (image tokens, or semantic and image
tokens) come from different token sets. To let a pretrained DeiT checkpoint
initialise them unchanged, :class:`CrossAttentionViTLayer` subclasses
mmpretrain's :class:`~mmpretrain.models.backbones.vision_transformer.
TransformerEncoderLayer` and keeps its parameter names (``ln1``,
``attn.qkv``, ``attn.proj``, ``ln2``, ``ffn``; ``attn.gamma1`` and
``ffn.gamma2`` with layer scale). The fused ``qkv`` projection is split at
run time: rows ``[:C]`` project the queries, rows ``[C:]`` the keys and
values (keys then values, the order of ``qkv``).
"""
from mmpretrain.models.backbones.vision_transformer import \
    TransformerEncoderLayer

from mmvitaccel.ops import cross_attention, project_key_values


class CrossAttentionViTLayer(TransformerEncoderLayer):
    """mmpretrain's ViT encoder layer with cross-attention.

    ``x' = shortcut + DropPath(gamma1 * Proj(softmax(q k^T * s + mask) v))``
    with ``q = W_q LN1(query)`` and ``k, v = W_kv LN1(keys)`` (computed by
    :meth:`key_values`, so a caller can project a token set once), then
    ``x = x' + DropPath(gamma2 * FFN(LN2(x')))``, as the upstream layer. One
    LayerNorm (``ln1``) is shared by queries and keys, as in the authors'
    code; the scale is ``s = head_dims ** -0.5``, as upstream. With
    ``kv = key_values(x)`` and ``query = x`` this is the upstream layer
    exactly. The constructor is the upstream one: the layer adds no
    parameters.

    Args:
        embed_dims (int): channels ``C``.
        num_heads (int): attention heads.
        feedforward_channels (int): FFN hidden channels.
        **kwargs: the other arguments of mmpretrain's
            ``TransformerEncoderLayer`` (``layer_scale_init_value``,
            ``drop_rate``, ``attn_drop_rate``, ``drop_path_rate``,
            ``num_fcs``, ``qkv_bias``, ``ffn_type``, ``act_cfg``,
            ``norm_cfg``, ``init_cfg``).
    """

    def key_values(self, tokens):
        """Keys and values of tokens: ``W_kv LN1(tokens)``.

        Args:
            tokens (Tensor): ``(..., C)``.

        Returns:
            Tensor: ``(..., 2C)``, keys then values.
        """
        return project_key_values(tokens, self.ln1, self.attn.qkv)

    def attend(self, queries, kv, key_valid=None):
        """Multi-head cross-attention with the layer's weights, output
        projection, dropouts and layer scale.

        Args:
            queries (Tensor): normalised queries ``(B, Lq, C)``.
            kv (Tensor): projected keys and values ``(B, Lk, 2C)`` from
                :meth:`key_values`.
            key_valid (Tensor, optional): ``(B, Lk)`` or ``(1, Lk)`` bool;
                False keys get no attention. Every query needs at least one
                valid key.

        Returns:
            Tensor: ``(B, Lq, C)``, the attention branch before the
            residual.
        """
        attn = self.attn
        C = queries.shape[-1]
        if kv.shape[-1] != 2 * C:
            raise ValueError(f'kv must have 2 * {C} channels (keys then '
                             f'values, from key_values), got {kv.shape[-1]}')
        out = cross_attention(queries, kv, attn.qkv, attn.num_heads,
                              attn.head_dims**-0.5,
                              attn.attn_drop if self.training else 0.,
                              key_valid)
        out = attn.proj(out)
        return attn.out_drop(attn.gamma1(attn.proj_drop(out)))

    def forward(self, query, kv, key_valid=None, shortcut=None):
        """Attention from ``query`` to projected keys, residual, FFN.

        Args:
            query (Tensor): ``(B, Lq, C)``, not normalised.
            kv (Tensor): ``(B, Lk, 2C)`` from :meth:`key_values`.
            key_valid (Tensor, optional): ``(B|1, Lk)`` bool key mask.
            shortcut (Tensor, optional): ``(B, Lq, C)``, residual of the
                attention; default ``query``.

        Returns:
            Tensor: ``(B, Lq, C)``.
        """
        identity = query if shortcut is None else shortcut
        x = identity + self.attend(self.ln1(query), kv, key_valid)
        return self.ffn(self.ln2(x), identity=x)
