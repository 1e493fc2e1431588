"""STViT on Swin (stvit_design.md §1.2) and the Swin base STViT-R shares."""

from mmvitaccel.ops import check_pooling, padded_shape, semantic_all_valid
from mmvitaccel.registry import MODELS
from mmvitaccel.models.stvit.semantic_attention import CrossAttentionSwinBlock
from mmvitaccel.models.stvit.semantic_swin_stage import (
                                                         SemanticGlobalBlockSequence,
                                                         SemanticSwinBlockSequence,
                                                         STViTSwinBlockSequence,
                                                         build_semantic_stages,
                                                         check_semantic_windows,
                                                         check_stgm_fits,
                                                         check_stgm_keys,
                                                         resolve_stgm_index)
from mmvitaccel.models.utils import (PretrainedMixin, SwinBase,
                                     check_in_channels, swin_config,
                                     swin_state_dict)

__all__ = [
    'SemanticSwinTransformer', 'STViTSwinTransformer',
    'SemanticSwinBlockSequence', 'STViTSwinBlockSequence',
    'SemanticGlobalBlockSequence', 'check_semantic_windows',
    'check_stgm_fits', 'resolve_stgm_index', 'OUT_TYPES'
]

OUT_TYPES = ('avg', 'featmap')


class SemanticSwinTransformer(PretrainedMixin, SwinBase):
    """mmdet's Swin with the configuration and loading STViT and STViT-R share.

    Not registered. ``init_weights`` loads Swin checkpoints with a report
    (:class:`PretrainedMixin`).

    Args:
        arch (str | None): ``'tiny'``, ``'small'``, ``'base'``; None: explicit.
        semantic_stage (int): the stage with semantic tokens.
        semantic_window (int): ``w_s``, in ``1 .. window_size``.
        key_windows (tuple[int, int]): ``w_k`` of STGM-1 and STGM-2
            (:func:`check_semantic_windows`).
        pooling (str): ``'max'``, ``'avg'`` or ``'intra_inter'``.
        stgm2_keys (str): ``'semantic_and_image'`` or ``'image'``.
        key_region (str): ``'inside'`` or ``'centred'``.
        **kwargs: the arguments of mmdet's ``SwinTransformer``.
    """

    def __init__(self, arch, semantic_stage, semantic_window, key_windows,
                 pooling, stgm2_keys='semantic_and_image',
                 key_region='inside', **kwargs):
        _, cfg = swin_config(arch, kwargs)
        window = cfg['window_size']
        if not 0 <= semantic_stage < len(cfg['depths']):
            raise ValueError(f'semantic stage {semantic_stage} does not '
                             f'exist in depths {tuple(cfg["depths"])}')
        check_pooling(pooling)
        check_semantic_windows(semantic_window, key_windows, window)
        check_stgm_keys(stgm2_keys, key_region)
        super().__init__(arch, **kwargs)
        self.semantic_stage = semantic_stage

    def block_args(self, stage):
        """Arguments of a :class:`CrossAttentionSwinBlock` of ``stage``."""
        cfg = self.swin_cfg
        dims = self.num_features[stage]
        return dict(
            embed_dims=dims,
            num_heads=cfg['num_heads'][stage],
            feedforward_channels=int(cfg['mlp_ratio'] * dims),
            qkv_bias=cfg['qkv_bias'],
            qk_scale=cfg['qk_scale'],
            drop_rate=cfg['drop_rate'],
            attn_drop_rate=cfg['attn_drop_rate'],
            act_cfg=cfg['act_cfg'],
            norm_cfg=cfg['norm_cfg'],
            with_cp=cfg['with_cp'])

    def cross_attention_block(self, stage, old):
        """A :class:`CrossAttentionSwinBlock` replacing Swin block ``old``."""
        return CrossAttentionSwinBlock(
            drop_path_rate=old.attn.drop.drop_prob, **self.block_args(stage))

    #: reads a Swin checkpoint in any supported layout
    host_state_dict = staticmethod(swin_state_dict)

    #: parameters (after ``stages.{i}.``) the method adds to Swin
    new_parameter_names = ('poolers.', 'global_centres.')

    @property
    def new_parameter_prefixes(self):
        """Names of the parameters the method adds to Swin."""
        return tuple(f'stages.{i}.{name}'
                     for i in range(len(self.stages))
                     for name in self.new_parameter_names)

    def init_new_parameters(self, fresh=None):
        """Initialise what STViT adds in every semantic stage.

        Args:
            fresh: unused.
        """
        for stage in self.stages:
            if isinstance(stage, SemanticSwinBlockSequence):
                stage.init_new_parameters()


@MODELS.register_module()
class STViTSwinTransformer(SemanticSwinTransformer):
    """STViT: Swin whose later blocks run on semantic tokens only.

    Stage ``semantic_stage``: Swin blocks, STGM at ``(i, i + 1)``, then local
    and global semantic blocks; the next patch merging becomes
    ``Linear(C, 2C)``; later stages attend globally. Swin names and shapes.

    Args:
        arch (str | None): ``'tiny'``, ``'small'``, ``'base'``; None: explicit.
        semantic_stage (int): stage of the STGM (index 2).
        stgm_index (int | None): 0-based STGM-1 block; None: the paper's
            (:func:`~.semantic_checks.stgm_index_for`).
        move_stgm (bool): use the "move STGM" default.
        semantic_window (int): ``w_s`` (3; 2 is the paper's option).
        key_windows (tuple[int, int]): ``w_k`` of STGM-1/2, ``w <= k1 <= k2``.
        key_region (str): ``'inside'`` (classification code) or ``'centred'``.
        stgm2_keys (str): ``'semantic_and_image'`` (Eq. 3) or ``'image'``.
        pooling (str): ``'max'``, ``'avg'`` or ``'intra_inter'``.
        global_centres (bool): learnable ``G`` on the STGM-2 queries.
        out_type (str): ``'avg'`` (mean of valid tokens, ``(B, C)``) or
            ``'featmap'`` (NCHW, padding zeroed).
        **kwargs: the arguments of mmdet's ``SwinTransformer``
            (``out_indices`` default ``(3, )``).
    """

    new_parameter_names = SemanticSwinTransformer.new_parameter_names + (
        'expand.', )

    def __init__(self,
                 arch=None,
                 semantic_stage=2,
                 stgm_index=None,
                 move_stgm=False,
                 semantic_window=3,
                 key_windows=(10, 14),
                 pooling='max',
                 global_centres=False,
                 out_type='avg',
                 stgm2_keys='semantic_and_image',
                 key_region='inside',
                 **kwargs):
        if out_type not in OUT_TYPES:
            raise ValueError(f'unknown out_type {out_type!r}; choose from '
                             f'{OUT_TYPES}')
        kwargs.setdefault('out_indices', (3, ))
        super().__init__(arch, semantic_stage, semantic_window, key_windows,
                         pooling, stgm2_keys, key_region, **kwargs)
        stgm_index = resolve_stgm_index(
            stgm_index, move_stgm, self.swin_cfg['depths'][semantic_stage])
        check_stgm_fits(stgm_index, self.swin_cfg['depths'][semantic_stage],
                        semantic_stage)
        self.out_type = out_type
        window = self.swin_cfg['window_size']
        build_semantic_stages(
            self.stages, semantic_stage, stgm_index, self.num_features,
            self.cross_attention_block,
            lambda stage, blocks, expand: STViTSwinBlockSequence(
                blocks=blocks,
                expand=expand,
                stgm_index=stgm_index,
                window_size=window,
                semantic_window=semantic_window,
                key_windows=key_windows,
                pooling=pooling,
                embed_dims=self.num_features[semantic_stage],
                global_centres=global_centres,
                stgm2_keys=stgm2_keys,
                key_region=key_region))

    def _output(self, i, out, hw_shape, valid):
        """Normalised output of stage ``i``: ``(B, C)`` or NCHW."""
        out = getattr(self, f'norm{i}')(out)  # (B, L, C)
        if valid is not None:
            out = out * valid[:, None].to(out.dtype)
        if self.out_type == 'avg':
            count = out.shape[1] if valid is None else valid.sum()
            return out.sum(1) / count
        return out.view(-1, *hw_shape, out.shape[-1]).permute(
            0, 3, 1, 2).contiguous()

    def forward(self, x):
        """Args:
            x (Tensor): images ``(B, 3, H, W)``, any size.

        Returns:
            tuple[Tensor]: per ``out_indices``, ``(B, C_i)`` or
            ``(B, C_i, H_i, W_i)``.
        """
        check_in_channels(x, self.patch_embed.projection.in_channels, 4)
        x, hw_shape = self.patch_embed(x)
        if self.use_abs_pos_embed:
            x = x + self.absolute_pos_embed
        x = self.drop_after_pos(x)
        valid = None
        outs = []
        for i, stage in enumerate(self.stages):
            if i < self.semantic_stage:
                x, hw_shape, out, out_shape = stage(x, hw_shape)
            elif i == self.semantic_stage:
                # all semantic tokens valid? (host-decided)
                w = stage.window_size
                all_valid = semantic_all_valid(
                    hw_shape, padded_shape(hw_shape, w), w,
                    stage.semantic_window)
                x, hw_shape, out, out_shape, valid = stage(x, hw_shape)
            else:
                x, hw_shape, out, out_shape, valid = stage(
                    x, hw_shape, valid, all_valid)
            if i in self.out_indices:
                outs.append(self._output(i, out, out_shape, valid))
        return tuple(outs)
