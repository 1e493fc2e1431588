"""Swin blocks that attend across token sets, with padding masks."""
import torch.utils.checkpoint as cp
from mmdet.models.backbones.swin import SwinBlock

from mmvitaccel.ops import (additive_mask, cross_attention, mask_or_none,
                            project_key_values, window_partition,
                            window_reverse)


def _nothing_to_init():
    """No-op init of a table-less WindowMSA (module-level: picklable)."""


class CrossAttentionSwinBlock(SwinBlock):
    """A Swin block whose queries attend to another token set (no pos. bias).

    ``x' = shortcut + DropPath(Proj(softmax(q k^T * s + mask) v))``,
    ``q = W_q LN1(query)``, ``k, v = W_kv LN1(keys)`` (``qkv[:C]``/``[C:]``),
    ``x = x' + FFN(LN2(x'))``.

    Args:
        embed_dims (int): channels ``C``.
        num_heads (int): attention heads.
        feedforward_channels (int): FFN hidden channels.
        **kwargs: the rest of mmdet's ``SwinBlock`` (``shift`` ignored).
    """

    def __init__(self, embed_dims, num_heads, feedforward_channels,
                 **kwargs):
        kwargs.pop('shift', None)
        super().__init__(embed_dims, num_heads, feedforward_channels,
                         **kwargs)
        del self.attn.w_msa.relative_position_bias_table
        del self.attn.w_msa.relative_position_index
        # WindowMSA.init_weights only fills the removed table
        self.attn.w_msa.init_weights = _nothing_to_init

    def key_values(self, tokens):
        """Keys then values ``W_kv LN1(tokens)``, ``(..., C) -> (..., 2C)``."""
        return project_key_values(tokens, self.norm1, self.attn.w_msa.qkv)

    def attend(self, queries, kv, key_valid=None):
        """``Proj(MHA(queries, kv))`` with the block's weights.

        Args:
            queries (Tensor): normalised queries ``(N, Lq, C)``.
            kv (Tensor): ``(N, Lk, 2C)`` from :meth:`key_values`.
            key_valid (Tensor, optional): ``(N|nW, Lk)`` or ``(1, Lq, Lk)``.

        Returns:
            Tensor: ``(N, Lq, C)``.
        """
        w_msa = self.attn.w_msa
        out = cross_attention(queries, kv, w_msa.qkv, w_msa.num_heads,
                              w_msa.scale,
                              w_msa.attn_drop.p if self.training else 0.,
                              key_valid)
        return w_msa.proj_drop(w_msa.proj(out))

    def forward(self, query, kv, key_valid=None, shortcut=None):
        """Attention from ``query`` to projected keys, residual, FFN.

        Args:
            query (Tensor): ``(N, Lq, C)``.
            kv (Tensor): ``(N, Lk, 2C)`` from :meth:`key_values`.
            key_valid (Tensor, optional): ``(N|nW, Lk)`` or ``(1, Lq, Lk)``.
            shortcut (Tensor, optional): residual; default ``query``.

        Returns:
            Tensor: ``(N, Lq, C)``.
        """

        def _inner_forward(query, kv):
            identity = query if shortcut is None else shortcut
            x = self.attn.drop(self.attend(self.norm1(query), kv, key_valid))
            x = x + identity
            return self.ffn(self.norm2(x), identity=x)

        if self.with_cp and query.requires_grad:
            return cp.checkpoint(
                _inner_forward, query, kv, use_reentrant=False)
        return _inner_forward(query, kv)


class MaskedWindowSwinBlock(SwinBlock):
    """Swin's W-MSA block on a padded map with padded keys masked; no shift.

    Args:
        embed_dims (int): channels.
        num_heads (int): attention heads.
        feedforward_channels (int): FFN hidden channels.
        window_size (int): window side.
        **kwargs: the other arguments of mmdet's ``SwinBlock``.
    """

    def __init__(self, embed_dims, num_heads, feedforward_channels,
                 window_size=7, **kwargs):
        if kwargs.pop('shift', False):
            raise ValueError('MaskedWindowSwinBlock has no shifted windows')
        super().__init__(embed_dims, num_heads, feedforward_channels,
                         window_size=window_size, **kwargs)

    def forward(self, x, valid=None, all_valid=None):
        """W-MSA + FFN on a padded map.

        Args:
            x (Tensor): ``(B, Hp, Wp, C)``, sides multiples of the window.
            valid (Tensor, optional): ``(Hp, Wp)`` bool, False on padding.
            all_valid (bool, optional): nothing padded, known on the host.

        Returns:
            Tensor: ``(B, Hp, Wp, C)``.
        """
        window = self.attn.window_size
        B, Hp, Wp, C = x.shape
        mask = None
        if valid is not None and \
                mask_or_none(valid, all_valid) is not None:
            key_valid = window_partition(valid, window)  # (nW, w*w)
            # (nW, w*w, w*w); padding < a window, so no row is all masked
            mask = additive_mask(
                key_valid[:, None, :].expand(-1, key_valid.shape[-1], -1),
                x.dtype)

        def _inner_forward(x):
            windows = window_partition(self.norm1(x), window)
            out = self.attn.w_msa(windows, mask=mask)
            out = window_reverse(out, window, Hp, Wp)
            x = x + self.attn.drop(out)
            return self.ffn(self.norm2(x), identity=x)

        if self.with_cp and x.requires_grad:
            return cp.checkpoint(_inner_forward, x, use_reentrant=False)
        return _inner_forward(x)
