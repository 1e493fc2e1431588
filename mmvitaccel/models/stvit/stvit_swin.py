"""STViT on Swin: semantic tokens generated in stage 3 and carried on.

Paper: Chang et al., *Making Vision Transformers Efficient from A Token
Sparsification View* (CVPR 2023). The authors released no code for plain
STViT (only STViT-R); the layout below is the reconstruction of
``docs/stvit_design.md`` (section 1.2):

* stage 3: upstream Swin blocks up to the STGM, then STGM-1 and STGM-2
  (blocks 3-4 of Swin-T, 11-12 of Swin-S/B, 1-based), then semantic blocks
  alternating local and global attention;
* the patch merging before stage 4 becomes a linear layer that doubles the
  channels of the semantic tokens; stage 4 attends globally among them;
* head: global average pooling over the (valid) semantic tokens.

The semantic stages are in
:mod:`mmvitaccel.models.stvit.semantic_swin_stage`; this module holds the
backbone STViT and STViT-R share (:class:`SemanticSwinTransformer`: the
Swin configuration and the checkpoint loading) and STViT's own
(:class:`STViTSwinTransformer`).
"""

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
    """mmdet's Swin with the configuration and loading that STViT and
    STViT-R share. ``init_weights`` (:class:`PretrainedMixin`) initialises
    from scratch as mmdet's Swin does, or loads a Swin checkpoint
    (official, mmdet/mmseg or mmpretrain layout) given as
    ``init_cfg=dict(type='Pretrained', checkpoint=...)``, with a report of
    new, missing, unused and mismatched keys (``self.load_report``). Not
    registered: build :class:`STViTSwinTransformer` or
    ``STViTRSwinTransformer``.

    Args:
        arch (str | None): ``'tiny'``, ``'small'`` or ``'base'`` sets
            ``embed_dims``, ``depths`` and ``num_heads``; None keeps the
            explicit ones.
        semantic_stage (int): the stage with semantic tokens.
        semantic_window (int): ``w_s``, semantic tokens per window side,
            in ``1 .. window_size``.
        key_windows (tuple[int, int]): ``w_k`` of STGM-1 and STGM-2, each
            at least ``window_size``, not decreasing
            (:func:`check_semantic_windows`).
        pooling (str): ``'max'``, ``'avg'`` or ``'intra_inter'``.
        stgm2_keys (str): ``'semantic_and_image'`` or ``'image'``
            (:data:`~mmvitaccel.models.stvit.semantic_swin_stage.STGM2_KEYS`).
        key_region (str): ``'inside'`` or ``'centred'``
            (:data:`~mmvitaccel.ops.windows.REGION_PLACEMENTS`).
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
        """A :class:`CrossAttentionSwinBlock` that replaces the Swin block
        ``old`` of ``stage`` (same parameter shapes and drop path)."""
        return CrossAttentionSwinBlock(
            drop_path_rate=old.attn.drop.drop_prob, **self.block_args(stage))

    #: reads a host (Swin) checkpoint in any supported layout into our names
    host_state_dict = staticmethod(swin_state_dict)

    #: names (after ``stages.{i}.``) of parameters the method adds to Swin
    new_parameter_names = ('poolers.', 'global_centres.')

    @property
    def new_parameter_prefixes(self):
        """Names of the parameters the method adds to Swin."""
        return tuple(f'stages.{i}.{name}'
                     for i in range(len(self.stages))
                     for name in self.new_parameter_names)

    def init_new_parameters(self, fresh=None):
        """Initialise what STViT adds to Swin in every semantic stage
        (:meth:`SemanticSwinBlockSequence.init_new_parameters`).

        Args:
            fresh: unused (everything STViT adds is new to a checkpoint).
        """
        for stage in self.stages:
            if isinstance(stage, SemanticSwinBlockSequence):
                stage.init_new_parameters()


@MODELS.register_module()
class STViTSwinTransformer(SemanticSwinTransformer):
    """STViT: Swin whose later blocks run on semantic tokens only.

    Stage 3 (``semantic_stage``) generates ``w_s x w_s`` semantic tokens per
    ``w x w`` window with an STGM at blocks ``(i, i + 1)``; the blocks after
    it attend locally (within a window's tokens) and globally, alternating.
    The patch merging before the next stage becomes a linear layer doubling
    the channels, and the later stages attend globally among the semantic
    tokens. Parameter names and shapes stay Swin's (the replaced blocks lose
    only their position tables, the patch merging after the semantic stage
    is unused and ``expand`` is new), so Swin checkpoints initialise it.

    Any input size works: the semantic stage pads to window multiples and
    masks the padding, and outputs from the semantic stage on do not depend
    on it (the blocks before the STGM are upstream Swin blocks).

    Args:
        arch (str | None): ``'tiny'``, ``'small'`` or ``'base'``, or None
            for explicit ``embed_dims``/``depths``/``num_heads``.
        semantic_stage (int): stage of the STGM (stage 3, index 2).
        stgm_index (int | None): 0-based block index of STGM-1 in the
            stage; None: the paper's (blocks 3-4 of Swin-T, 11-12 of S/B,
            1-based), or with ``move_stgm`` its "move STGM" variant (1
            block earlier for T, 2 for S/B); on any other depth the
            paper's rule that gives them, as the switch places it
            (:func:`~.semantic_checks.stgm_index_for`).
        move_stgm (bool): use the "move STGM" default.
        semantic_window (int): ``w_s``; 3 (9 tokens per window) by
            default, 2 (4 tokens) as the paper's option.
        key_windows (tuple[int, int]): ``w_k`` of STGM-1 and STGM-2, each
            at least the window size, ``k1 <= k2``; the paper's 10 and 14
            for classification.
        key_region (str): where each ``w_k x w_k`` region sits:
            ``'inside'`` (default), the region around the window moved
            until it lies inside the map, as the authors' classification
            code (where 10 and 14 come from) unfolds it: at 224 px every
            window of STGM-1 sees 10x10 keys and STGM-2 the whole 14x14
            map; ``'centred'``: centred on the window and clipped to the
            map (the authors' detection code), 9x9 to 8x8 and 11x11 to
            10x10 keys at 224 px.
        stgm2_keys (str): ``'semantic_and_image'`` (default): STGM-2 attends
            to ``Concat(S1, X)``, the paper's Eq. 3 ("S2 = MHA(S1 + G,
            Concat(S1, X), Concat(S1, X))"), with the ``S1`` of the windows
            lying entirely in the region (all of them at 224 px, as in the
            authors' classification code); ``'image'``: ``X`` only.
        pooling (str): initial centres: ``'max'`` (the authors'), ``'avg'``
            or ``'intra_inter'`` (the paper's learnable pooling).
        global_centres (bool): learnable ``G`` added to the STGM-2 queries;
            off for Swin, as in the authors' runs.
        out_type (str): ``'avg'``: each output is the mean over its valid
            tokens, ``(B, C)`` (the paper's head); ``'featmap'``: NCHW maps
            (the semantic grid from the semantic stage on, with padded
            tokens zeroed).
        **kwargs: the arguments of mmdet's ``SwinTransformer``;
            ``out_indices`` defaults to ``(3, )``, the classifier's input.
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
            tuple[Tensor]: for each of ``out_indices``, ``(B, C_i)``
            (``out_type='avg'``) or ``(B, C_i, H_i, W_i)``.
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
                # every semantic token valid? decided on the host
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
