"""STViT on Video Swin: per-frame semantic tokens (stvit_design.md §7)."""
import numpy as np
import torch.utils.checkpoint as cp
from mmaction.models.backbones.swin import (SwinTransformer3D,
                                            SwinTransformerBlock3D,
                                            compute_mask, get_window_size)
from mmengine.logging import MMLogger
from mmengine.model import BaseModule

from mmvitaccel.ops import (check_pooling, pad_to_multiple, padded_shape,
                            semantic_all_valid, window_reverse)
from mmvitaccel.registry import MODELS
from mmvitaccel.ops import cross_attention, project_key_values
from mmvitaccel.models.stvit.semantic_swin_stage import (
                                                         SemanticSwinBlockSequence,
                                                         build_semantic_stages,
                                                         check_semantic_windows,
                                                         check_stgm_fits,
                                                         check_stgm_keys,
                                                         resolve_stgm_index)
from mmvitaccel.models.utils import (PretrainedMixin, check_in_channels,
                                     inflate_2d_swin, load_with_report,
                                     video_swin_state_dict)


class CrossAttentionSwinBlock3D(SwinTransformerBlock3D):
    """A Video Swin block whose queries attend to another token set (no bias).

    ``x' = shortcut + DropPath(Proj(softmax(q k^T * s + mask) v))``,
    ``q = W_q LN1(query)``, ``k, v = W_kv LN1(keys)``,
    ``x = x' + DropPath(MLP(LN2(x')))``; mmaction2's names.

    Args:
        embed_dims (int): channels ``C``.
        num_heads (int): attention heads.
        **kwargs: the rest of mmaction2's ``SwinTransformerBlock3D``.
    """

    def __init__(self, embed_dims, num_heads, **kwargs):
        kwargs.pop('shift_size', None)
        super().__init__(embed_dims, num_heads, **kwargs)
        del self.attn.relative_position_bias_table
        del self.attn.relative_position_index

    def key_values(self, tokens):
        """Keys then values ``W_kv LN1(tokens)``: ``(..., C) -> (..., 2C)``."""
        return project_key_values(tokens, self.norm1, self.attn.qkv)

    def forward(self, query, kv, key_valid=None, shortcut=None):
        """Attention from ``query`` to projected keys, residual, MLP.

        Args:
            query (Tensor): ``(N, Lq, C)``.
            kv (Tensor): ``(N, Lk, 2C)`` from :meth:`key_values`.
            key_valid (Tensor, optional): ``(N|nW, Lk)`` bool key mask.
            shortcut (Tensor, optional): residual; default ``query``.

        Returns:
            Tensor: ``(N, Lq, C)``.
        """

        def _inner_forward(query, kv):
            attn = self.attn
            identity = query if shortcut is None else shortcut
            out = cross_attention(self.norm1(query), kv, attn.qkv,
                                  attn.num_heads, attn.scale,
                                  attn.attn_drop.p if self.training else 0.,
                                  key_valid)
            x = identity + self.drop_path(attn.proj_drop(attn.proj(out)))
            return x + self.drop_path(self.mlp(self.norm2(x)))

        if self.with_cp and query.requires_grad:
            return cp.checkpoint(
                _inner_forward, query, kv, use_reentrant=False)
        return _inner_forward(query, kv)


class STViTSwinBlockSequence3D(SemanticSwinBlockSequence):
    """STViT's Video Swin stage: Swin ``blocks[:i]``, per-frame STGM, then
    semantic blocks, local (one frame's window) and global (the clip).

    Args:
        blocks (ModuleList): all blocks of the stage.
        expand (nn.Module | None): ``Linear(C, 2C)`` or None.
        stgm_index (int): ``i``, the block index of STGM-1.
        window_size_3d (tuple[int, int, int]): Video Swin's window.
        shift_size (tuple[int, int, int]): its shift for odd blocks.
        **kwargs: :class:`SemanticSwinBlockSequence`'s but ``num_stgm``.
    """

    def __init__(self, blocks, expand, stgm_index, window_size_3d,
                 shift_size, **kwargs):
        super().__init__(blocks, num_stgm=1, **kwargs)
        self.expand = expand
        self.stgm_index = stgm_index
        self.window_size_3d = tuple(window_size_3d)
        self.shift_size = tuple(shift_size)

    def _upstream_blocks(self, x):
        """Upstream blocks on ``(B, D, H, W, C)``, ``BasicLayer``'s mask."""
        _, D, H, W, _ = x.shape
        window, shift = get_window_size((D, H, W), self.window_size_3d,
                                        self.shift_size)
        Dp, Hp, Wp = (int(np.ceil(n / w)) * w
                      for n, w in zip((D, H, W), window))
        attn_mask = compute_mask(Dp, Hp, Wp, window, shift, x.device)
        for block in self.blocks[:self.stgm_index]:
            x = block(x, attn_mask)
        return x

    def forward(self, x):
        """Image tokens of a clip in, semantic tokens out.

        Args:
            x (Tensor): ``(B, C, D, H, W)``.

        Returns:
            tuple: ``(x_down, grid_shape, out, grid_shape, valid)``: tokens
            ``(B, D * s_H * s_W, 2C)`` after ``expand``, ``(..., C)`` before,
            ordered ``(d, row, col)``; grid ``(D, s_H, s_W)``; validity
            ``(D * s_H * s_W, )``.
        """
        i, w, s = self.stgm_index, self.window_size, self.semantic_window
        x = self._upstream_blocks(x.permute(0, 2, 3, 4, 1).contiguous())
        B, D, H, W, C = x.shape
        # fold time into the batch
        x, valid = pad_to_multiple(x.view(B * D, H, W, C), w)
        grid = (x.shape[1] // w * s, x.shape[2] // w * s)
        _, sem, sem_valid = self.generate(0, self.blocks[i],
                                          self.blocks[i + 1], x, valid,
                                          hw=(H, W))
        all_valid = semantic_all_valid((H, W), x.shape[1:3], w, s)
        clip_valid = sem_valid.reshape(-1).repeat(D)
        for j, block in enumerate(self.blocks[i + 2:]):
            if j % 2 == 0:  # local: a window's tokens in one frame
                sem = self.attend_local(block, sem, sem_valid, all_valid)
            else:  # global: every semantic token of the clip
                sem = self.attend_global(block, sem.view(B, -1, C),
                                         clip_valid, all_valid).view_as(sem)
        out = window_reverse(sem, s, *grid).view(B, -1, C)
        valid = window_reverse(sem_valid[..., None], s, *grid).view(-1)
        valid = valid.repeat(D)
        x_down = out if self.expand is None else self.expand(out)
        return x_down, (D, *grid), out, (D, *grid), valid


@MODELS.register_module()
class STViTSwinTransformer3D(PretrainedMixin, SwinTransformer3D):
    """STViT on mmaction2's ``SwinTransformer3D``, out ``(B, C, D, s_H, s_W)``.

    Loads Video Swin checkpoints with a report; ``pretrained2d=True`` inflates
    a 2-D Swin (:func:`~mmvitaccel.models.utils.inflate_2d_swin`).

    Args:
        arch (str | dict): ``'tiny'``, ``'small'``, ``'base'`` or a dict.
        semantic_stage (int): stage of the STGM (index 2).
        stgm_index (int | None): 0-based STGM-1 block; None: the paper's
            (:func:`~.semantic_checks.stgm_index_for`).
        move_stgm (bool): use the "move STGM" default.
        semantic_window (int): ``w_s``, 3 (9 tokens per window and frame).
        key_windows (tuple[int, int]): per-frame ``w_k``, ``w <= k1 <= k2``.
        pooling (str): ``'max'``, ``'avg'`` or ``'intra_inter'``.
        global_centres (bool): learnable ``G`` on the STGM-2 queries.
        stgm2_keys (str): ``'semantic_and_image'`` (Eq. 3) or ``'image'``.
        key_region (str): ``'inside'`` or ``'centred'``.
        **kwargs: mmaction2's ``SwinTransformer3D``'s
            (``out_after_downsample=False``).
    """

    def __init__(self,
                 arch,
                 semantic_stage=2,
                 stgm_index=None,
                 move_stgm=False,
                 semantic_window=3,
                 key_windows=(10, 14),
                 pooling='max',
                 global_centres=False,
                 stgm2_keys='semantic_and_image',
                 key_region='inside',
                 **kwargs):
        check_pooling(pooling)
        if kwargs.get('out_after_downsample', False):
            raise ValueError('out_after_downsample=True is not supported: '
                             'the semantic stages have no patch merging')
        window_3d = tuple(kwargs.get('window_size', (8, 7, 7)))
        if window_3d[1] != window_3d[2]:
            raise ValueError(f'the spatial window must be square, got '
                             f'{window_3d}')
        window = window_3d[1]
        check_semantic_windows(semantic_window, key_windows, window)
        check_stgm_keys(stgm2_keys, key_region)
        super().__init__(arch, **kwargs)
        if not 0 <= semantic_stage < self.num_layers:
            raise ValueError(f'semantic stage {semantic_stage} does not '
                             f'exist in depths {tuple(self.depths)}')
        stgm_index = resolve_stgm_index(stgm_index, move_stgm,
                                        self.depths[semantic_stage])
        check_stgm_fits(stgm_index, self.depths[semantic_stage],
                        semantic_stage)
        self.semantic_stage = semantic_stage
        build_semantic_stages(
            self.layers, semantic_stage, stgm_index,
            [layer.embed_dims for layer in self.layers],
            lambda i, old: self._cross_attention_block(old),
            lambda layer, blocks, expand: STViTSwinBlockSequence3D(
                blocks=blocks,
                expand=expand,
                stgm_index=stgm_index,
                window_size_3d=layer.window_size,
                shift_size=layer.shift_size,
                window_size=window,
                semantic_window=semantic_window,
                key_windows=key_windows,
                pooling=pooling,
                embed_dims=layer.embed_dims,
                global_centres=global_centres,
                stgm2_keys=stgm2_keys,
                key_region=key_region))

    @staticmethod
    def _cross_attention_block(old):
        """A cross-attention block like Video Swin block ``old``."""
        drop_path = old.drop_path.drop_prob \
            if hasattr(old.drop_path, 'drop_prob') else 0.
        return CrossAttentionSwinBlock3D(
            embed_dims=old.embed_dims,
            num_heads=old.num_heads,
            mlp_ratio=old.mlp_ratio,
            qkv_bias=old.attn.qkv.bias is not None,
            qk_scale=old.attn.scale,
            drop=old.attn.proj_drop.p,
            attn_drop=old.attn.attn_drop.p,
            drop_path=drop_path,
            act_cfg=dict(type=type(old.mlp.act).__name__),
            norm_cfg=dict(type='LN'),
            with_cp=old.with_cp)

    #: reads a Video Swin checkpoint
    host_state_dict = staticmethod(video_swin_state_dict)

    @property
    def new_parameter_prefixes(self):
        """Names of the parameters STViT adds to Video Swin."""
        return tuple(f'layers.{i}.{name}' for i in range(self.num_layers)
                     for name in ('poolers.', 'global_centres.', 'expand.'))

    def init_new_parameters(self, fresh=None):
        """Initialise what STViT adds in the semantic stage.

        Args:
            fresh: unused.
        """
        self.layers[self.semantic_stage].init_new_parameters()

    def init_host_weights(self):
        """From scratch as Video Swin's ``init_cfg``, without inflation."""
        BaseModule.init_weights(self)

    def inflate_weights(self, logger):
        """Inflate and load the 2-D Swin ``self.pretrained`` with a report.

        Args:
            logger (MMLogger): where the report goes.
        """
        state_dict = inflate_2d_swin(self, self.pretrained, logger)
        self.load_report = load_with_report(
            self, state_dict, self.new_parameter_prefixes, logger)

    def init_weights(self):
        """Load Video Swin (``init_cfg``, or ``pretrained`` without
        ``pretrained2d``), inflate a 2-D Swin, or init from scratch."""
        if self.pretrained and not self.pretrained2d:
            # as upstream
            self.init_cfg = dict(type='Pretrained', checkpoint=self.pretrained)
        if self.pretrained_checkpoint() is None and self.pretrained2d and \
                self.pretrained:
            self.inflate_weights(MMLogger.get_current_instance())
            self.init_new_parameters()
            return
        super().init_weights()

    def forward(self, x):
        """Args:
            x (Tensor): clips ``(B, 3, T, H, W)``.

        Returns:
            Tensor | tuple[Tensor]: ``(B, C_i, D_i, H_i, W_i)`` per
            ``out_indices`` (a tensor when there is one).
        """
        check_in_channels(x, self.patch_embed.proj.in_channels, 5)
        x = self.pos_drop(self.patch_embed(x))
        valid = None
        outs = []
        for i, layer in enumerate(self.layers):
            if i < self.semantic_stage:
                x = layer(x.contiguous(), do_downsample=False)
                out, grid = x, None
                if layer.downsample is not None:
                    x = layer.downsample(x)
                x = x.permute(0, 4, 1, 2, 3)
            elif i == self.semantic_stage:
                # all semantic tokens valid? (host-decided)
                hw, w = x.shape[3:], layer.window_size
                all_valid = semantic_all_valid(hw, padded_shape(hw, w), w,
                                               layer.semantic_window)
                x, grid, out, _, valid = layer(x)
            else:
                x, grid, out, _, valid = layer(x, grid, valid, all_valid)
            if i in self.out_indices:
                out = getattr(self, f'norm{i}')(out)
                if valid is not None:  # (B, D*s_H*s_W, C) -> NCDHW
                    out = out * valid[:, None].to(out.dtype)
                    out = out.view(out.shape[0], *grid, out.shape[-1])
                outs.append(out.permute(0, 4, 1, 2, 3).contiguous())
        return outs[0] if len(outs) == 1 else tuple(outs)
