"""A ViT encoder layer whose queries attend to another token set."""
from mmpretrain.models.backbones.vision_transformer import \
    TransformerEncoderLayer

from mmvitaccel.ops import cross_attention, project_key_values


class CrossAttentionViTLayer(TransformerEncoderLayer):
    """mmpretrain's ViT encoder layer with cross-attention (no new parameters).

    ``x' = shortcut + DropPath(gamma1 * Proj(softmax(q k^T * s + mask) v))``,
    ``q = W_q LN1(query)``, ``k, v = W_kv LN1(keys)`` (``qkv[:C]``/``[C:]``),
    ``x = x' + DropPath(gamma2 * FFN(LN2(x')))``, ``s = head_dims ** -0.5``.

    Args:
        embed_dims (int): channels ``C``.
        num_heads (int): attention heads.
        feedforward_channels (int): FFN hidden channels.
        **kwargs: the rest of mmpretrain's ``TransformerEncoderLayer``.
    """

    def key_values(self, tokens):
        """Keys then values, ``W_kv LN1(tokens)``.

        Args:
            tokens (Tensor): ``(..., C)``.

        Returns:
            Tensor: ``(..., 2C)``.
        """
        return project_key_values(tokens, self.ln1, self.attn.qkv)

    def attend(self, queries, kv, key_valid=None):
        """Attention branch before the residual: ``gamma1 * Proj(MHA)``.

        Args:
            queries (Tensor): normalised queries ``(B, Lq, C)``.
            kv (Tensor): ``(B, Lk, 2C)`` from :meth:`key_values`.
            key_valid (Tensor, optional): ``(B|1, Lk)`` bool, False: masked.

        Returns:
            Tensor: ``(B, Lq, C)``.
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
            shortcut (Tensor, optional): ``(B, Lq, C)``; default ``query``.

        Returns:
            Tensor: ``(B, Lq, C)``.
        """
        identity = query if shortcut is None else shortcut
        x = identity + self.attend(self.ln1(query), kv, key_valid)
        return self.ffn(self.ln2(x), identity=x)
