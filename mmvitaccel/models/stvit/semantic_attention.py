"""Swin blocks that attend across token sets, with padding masks.

STViT's STGM, semantic and recovery layers are ordinary transformer layers
whose queries and keys come from different token sets (image tokens,
cluster centres, semantic tokens). To let a pretrained Swin checkpoint
initialise them unchanged, they subclass mmdet's
:class:`~mmdet.models.backbones.swin.SwinBlock` and keep its parameter names
(``norm1``, ``attn.w_msa.qkv``, ``attn.w_msa.proj``, ``norm2``, ``ffn``).
The fused ``qkv`` projection is split at run time: rows ``[:C]`` project the
queries, rows ``[C:]`` the keys and values.
"""
import torch.utils.checkpoint as cp
from mmdet.models.backbones.swin import SwinBlock

from mmvitaccel.ops import (additive_mask, cross_attention, mask_or_none,
                            project_key_values, window_partition,
                            window_reverse)


def _nothing_to_init():
    """Init of a WindowMSA without its position table (a module-level
    function, so that the model still pickles)."""


class CrossAttentionSwinBlock(SwinBlock):
    """A Swin block whose queries attend to another set of tokens.

    ``x' = shortcut + DropPath(Proj(softmax(q k^T * s + mask) v))`` with
    ``q = W_q LN1(query)`` and ``k, v = W_kv LN1(keys)`` (computed by
    :meth:`key_values`, so callers can project a map once and gather
    windows of it), then
    ``x = x' + FFN(LN2(x'))``. One LayerNorm is shared by queries and keys,
    as in the authors' code. There is no relative position bias (queries
    and keys do not share a grid); the table inherited from Swin is removed,
    so a Swin checkpoint leaves exactly ``relative_position_bias_table`` and
    ``relative_position_index`` of these blocks unused.

    Args:
        embed_dims (int): channels ``C``.
        num_heads (int): attention heads.
        feedforward_channels (int): FFN hidden channels.
        **kwargs: the other arguments of mmdet's ``SwinBlock``
            (``qkv_bias``, ``qk_scale``, ``drop_rate``, ``attn_drop_rate``,
            ``drop_path_rate``, ``act_cfg``, ``norm_cfg``, ``with_cp``,
            ``init_cfg``); ``window_size``/``shift`` are meaningless here.
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
        """Keys and values ``W_kv LN1(tokens)``, ``(..., C) -> (..., 2C)``
        (see :func:`project_key_values`)."""
        return project_key_values(tokens, self.norm1, self.attn.w_msa.qkv)

    def attend(self, queries, kv, key_valid=None):
        """Multi-head cross-attention with the block's weights
        (:func:`cross_attention`), then the output projection.

        Args:
            queries (Tensor): normalised queries ``(N, Lq, C)``.
            kv (Tensor): projected keys and values ``(N, Lk, 2C)`` from
                :meth:`key_values`.
            key_valid (Tensor, optional): ``(N, Lk)``, per-window
                ``(nW, Lk)`` or per-query ``(1, Lq, Lk)`` bool; False keys
                get no attention.

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
            key_valid (Tensor, optional): ``(N|nW, Lk)`` or ``(1, Lq, Lk)``
                bool key mask.
            shortcut (Tensor, optional): residual of the attention, default
                ``query``.

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
    """Swin's W-MSA block on a padded map, with padded keys masked out.

    Upstream Swin zero-pads to window multiples and lets real tokens attend
    to the padding, so its outputs depend on the padding. This block runs
    the same computation (same weights, relative position bias included)
    on windows of an already padded map and masks padded keys, so valid
    outputs do not depend on what the padding holds. On an unpadded map it
    equals the upstream block exactly. No shifted windows.

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
            all_valid (bool, optional): whether nothing is padded, known on
                the host (:func:`~mmvitaccel.ops.host_masks.unpadded`);
                without it ``valid`` is read (a synchronisation).

        Returns:
            Tensor: ``(B, Hp, Wp, C)``.
        """
        window = self.attn.window_size
        B, Hp, Wp, C = x.shape
        mask = None
        if valid is not None and \
                mask_or_none(valid, all_valid) is not None:
            key_valid = window_partition(valid, window)  # (nW, w*w)
            # (nW, w*w, w*w): MASKED_LOGIT on padded keys, every window
            # holds a valid key (the padding is less than a window)
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
