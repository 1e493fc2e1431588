"""STViT-R on Swin: dumbbell units of semantic tokens in stage 3."""
from mmdet.models.backbones.swin import ShiftWindowMSA, SwinTransformer
from mmengine.model import ModuleList

from mmvitaccel.ops import check_choice
from mmvitaccel.registry import MODELS
from mmvitaccel.models.stvit.semantic_attention import MaskedWindowSwinBlock
from mmvitaccel.models.stvit.dumbbell_swin_stage import (REUSE_SOURCES,
                                                         UNIT_LAYOUT,
                                                         DumbbellSwinBlockSequence,
                                                         SingleRecoverySwinBlockSequence,
                                                         stage_roles)  #noqa: F401 (re-exported)
from mmvitaccel.models.stvit.stvit_authors import (ConvStem,
                                                   LayerScaleCrossAttentionSwinBlock,
                                                   UnshiftedSmallMapMSA)
from mmvitaccel.models.utils import check_in_channels, check_int
from mmvitaccel.models.stvit.stvit_checkpoint import stvit_r_state_dict
from mmvitaccel.models.stvit.stvit_swin import SemanticSwinTransformer

#: allowed values of the options of the authors' layout
STEMS = ('patch', 'conv')
STGM_FORMS = ('paper', 'authors')
CENTRE_UNITS = ('all', 'first')

#: dumbbell units, or Table 9's "without dumbbell units"
LAYOUTS = ('dumbbell', 'single')

#: ``layout='single'``: STGM-1 block, "6th and 7th" read 1-based
SINGLE_STGM_INDEX = 5

#: ``layout='single'``: recovery blocks, FLOPs closest to the full model's
SINGLE_NUM_RECOVERY = 2


@MODELS.register_module()
class STViTRSwinTransformer(SemanticSwinTransformer):
    """STViT-R: Swin with dumbbell units of semantic tokens in one stage.

    A drop-in for mmdet's ``SwinTransformer`` (same pyramid and names). Stage
    ``dumbbell_stage`` is regrouped into units ``[image, STGM-1, STGM-2,
    semantic local, semantic global, recovery]``; any input size.

    Args:
        arch (str | None): ``'tiny'``, ``'small'``, ``'base'``; None: explicit.
        dumbbell_stage (int): the stage made of dumbbell units.
        num_units (int | None): units from the stage start; None: all
            (depth a multiple of 6); 0: plain Swin.
        semantic_window (int): ``w_s`` (3: 9 tokens per window).
        key_windows (tuple[int, int]): ``w_k`` of STGM-1/2, ``w <= k1 <= k2``.
        recovery_window (int): semantic neighbourhood of recovery (27).
        pooling (str): ``'max'``, ``'avg'`` or ``'intra_inter'``.
        global_centres (bool): learnable ``G`` on the STGM-2 queries.
        mask_padding (bool): also mask padding in the units' image blocks.
        stgm2_keys (str): ``'semantic_and_image'`` (Eq. 3) or ``'image'``.
        key_region (str): ``'centred'`` (detection code) or ``'inside'``.
        stem (str): ``'patch'`` (Swin's) or ``'conv'``
            (:class:`~mmvitaccel.models.stvit.stvit_authors.ConvStem`).
        layer_scale (float | None): initial layer scale of the units'
            cross-attention blocks (authors: 1e-5); None: none.
        stgm_form (str): ``'paper'`` or ``'authors'``
            (:meth:`DumbbellSwinBlockSequence.generate_authors`).
        centre_units (str): units adding ``G``: ``'all'`` or ``'first'``.
        kv_per_region (bool): ``stgm_form='authors'`` only: project keys and
            values per gathered region (their cost).
        shift_small_maps (bool): False: leave one-window maps unshifted.
        layout (str): ``'dumbbell'`` or ``'single'`` (Table 9, no dumbbell
            units, :class:`~mmvitaccel.models.stvit.dumbbell_swin_stage.
            SingleRecoverySwinBlockSequence`).
        stgm_index (int | None): ``'single'`` only: STGM-1 block; None: 5.
        num_recovery (int | None): ``'single'`` only: recovery blocks; None: 2.
        semantic_reuse (bool): Table 9: centres generated in the first unit
            and reused by the later ones (needs 2 units).
        reuse_from (str): ``'previous_unit'`` or ``'first_stgm'``.
        **kwargs: the arguments of mmdet's ``SwinTransformer``.
    """

    def __init__(self,
                 arch=None,
                 dumbbell_stage=2,
                 num_units=None,
                 semantic_window=3,
                 key_windows=(14, 21),
                 recovery_window=27,
                 pooling='max',
                 global_centres=False,
                 mask_padding=True,
                 stgm2_keys='semantic_and_image',
                 key_region='centred',
                 stem='patch',
                 layer_scale=None,
                 stgm_form='paper',
                 centre_units='all',
                 kv_per_region=False,
                 shift_small_maps=True,
                 layout='dumbbell',
                 stgm_index=None,
                 semantic_reuse=False,
                 reuse_from='previous_unit',
                 num_recovery=None,
                 **kwargs):
        check_choice('stem', stem, STEMS)
        check_choice('stgm_form', stgm_form, STGM_FORMS)
        check_choice('centre_units', centre_units, CENTRE_UNITS)
        check_choice('layout', layout, LAYOUTS)
        check_choice('reuse_from', reuse_from, REUSE_SOURCES)
        if not isinstance(semantic_reuse, bool):
            raise TypeError(f'semantic_reuse must be True or False, got '
                            f'{semantic_reuse!r}')
        if reuse_from != 'previous_unit' and not semantic_reuse:
            raise ValueError(f'reuse_from={reuse_from!r} chooses the tokens '
                             f'that semantic_reuse=True reuses; set '
                             f'semantic_reuse=True or drop reuse_from')
        if kv_per_region and stgm_form != 'authors':
            raise ValueError("kv_per_region=True is the cost of the authors' "
                             "region gathering: it needs stgm_form='authors'")
        super().__init__(arch, dumbbell_stage, semantic_window, key_windows,
                         pooling, stgm2_keys, key_region, **kwargs)
        self.stem = stem
        self.layer_scale = layer_scale
        if stem == 'conv':
            if self.swin_cfg['patch_size'] != 4:
                raise ValueError(f"stem='conv' has output stride 4; "
                                 f"patch_size must be 4, got "
                                 f"{self.swin_cfg['patch_size']}")
            self.patch_embed = ConvStem(self.swin_cfg['in_channels'],
                                        self.swin_cfg['embed_dims'])
        if not shift_small_maps:
            for module in self.modules():
                if type(module) is ShiftWindowMSA:
                    module.__class__ = UnshiftedSmallMapMSA
        check_int('recovery_window', recovery_window, low=semantic_window,
                  hint='semantic tokens per side of the region each image '
                  'window attends to, at least semantic_window')
        self.dumbbell_stage = dumbbell_stage
        self.layout = layout
        stage = self.stages[dumbbell_stage]
        depth = len(stage.blocks)
        if layout == 'single':
            num_recovery, stgm_index = self._check_single(
                depth, dumbbell_stage, num_units, stgm_index, num_recovery,
                semantic_reuse, mask_padding)
            num_units = 0
        else:
            num_units = self._check_units(depth, dumbbell_stage, num_units,
                                          stgm_index, num_recovery,
                                          semantic_reuse)
        self.roles = stage_roles(layout, depth, num_units, stgm_index,
                                 num_recovery)
        window = self.swin_cfg['window_size']
        blocks = ModuleList()
        for old, role in zip(stage.blocks, self.roles):
            if role == 'swin':
                blocks.append(old)
            elif role == 'image':
                blocks.append(
                    MaskedWindowSwinBlock(
                        window_size=window,
                        drop_path_rate=old.attn.drop.drop_prob,
                        **self.block_args(dumbbell_stage)))
            elif layer_scale is None:
                blocks.append(self.cross_attention_block(dumbbell_stage, old))
            else:
                blocks.append(
                    LayerScaleCrossAttentionSwinBlock(
                        layer_scale_init_value=layer_scale,
                        drop_path_rate=old.attn.drop.drop_prob,
                        **self.block_args(dumbbell_stage)))
        common = dict(
            blocks=blocks,
            downsample=stage.downsample,
            recovery_window=recovery_window,
            window_size=window,
            semantic_window=semantic_window,
            key_windows=key_windows,
            pooling=pooling,
            embed_dims=self.num_features[dumbbell_stage],
            global_centres=global_centres,
            stgm_form=stgm_form,
            centre_units=centre_units,
            kv_per_region=kv_per_region,
            stgm2_keys=stgm2_keys,
            key_region=key_region)
        if layout == 'single':
            self.stages[dumbbell_stage] = SingleRecoverySwinBlockSequence(
                stgm_index=stgm_index, num_recovery=num_recovery, **common)
        else:
            self.stages[dumbbell_stage] = DumbbellSwinBlockSequence(
                num_units=num_units, mask_padding=mask_padding,
                semantic_reuse=semantic_reuse, reuse_from=reuse_from,
                **common)

    @staticmethod
    def _check_units(depth, stage, num_units, stgm_index, num_recovery,
                     semantic_reuse):
        """``num_units`` of ``layout='dumbbell'`` (None: all), checked."""
        for name, value in (('stgm_index', stgm_index),
                            ('num_recovery', num_recovery)):
            if value is not None:
                raise ValueError(f"{name}={value} shapes the stage of "
                                 f"layout='single'; layout='dumbbell' has "
                                 f"one STGM and one recovery per unit: drop "
                                 f"{name}")
        if num_units is None:
            if depth == 0 or depth % 6:
                raise ValueError(
                    f'stage {stage} has {depth} blocks: room for at '
                    f'most {depth // 6} dumbbell units of 6 and '
                    f'{depth % 6} left over; set num_units explicitly')
            num_units = depth // 6
        if not 0 <= num_units <= depth // 6:
            raise ValueError(
                f'stage {stage} has {depth} blocks: room for at most '
                f'{depth // 6} dumbbell units of 6, not {num_units}')
        if semantic_reuse and num_units < 2:
            raise ValueError(f'semantic_reuse=True reuses the first unit\'s '
                             f'semantic tokens in the later units; it needs '
                             f'num_units >= 2, got {num_units}')
        return num_units

    @staticmethod
    def _check_single(depth, stage, num_units, stgm_index, num_recovery,
                      semantic_reuse, mask_padding):
        """``(num_recovery, stgm_index)`` of ``layout='single'``, checked."""
        if num_units is not None:
            raise ValueError(f"layout='single' has no dumbbell units; drop "
                             f"num_units (got {num_units})")
        if semantic_reuse:
            raise ValueError("semantic_reuse=True reuses semantic tokens "
                             "across dumbbell units; layout='single' has "
                             "one STGM: use layout='dumbbell'")
        if not mask_padding:
            raise ValueError("mask_padding=False concerns the dumbbell "
                             "units' image blocks; layout='single' keeps "
                             "Swin's blocks before its STGM: drop it")
        if num_recovery is None:
            num_recovery = SINGLE_NUM_RECOVERY
        check_int('num_recovery', num_recovery, 1, depth - 2,
                  hint=f"recovery blocks at the end of the {depth} blocks "
                  f"of stage {stage}, after the STGM's 2")
        if stgm_index is None:
            stgm_index = SINGLE_STGM_INDEX
        return num_recovery, check_int(
            'stgm_index', stgm_index, 0, depth - 2 - num_recovery,
            hint=f"layout='single' needs the STGM (2 blocks) and the "
            f"recovery ({num_recovery}) inside the {depth} blocks of stage "
            f"{stage}")

    #: reads any Swin layout and the authors' STViT-R
    host_state_dict = staticmethod(stvit_r_state_dict)

    @property
    def new_parameter_prefixes(self):
        """Parameters STViT-R adds to Swin: STGM, layer scales, conv stem."""
        names = tuple(super().new_parameter_prefixes)
        names += tuple(k for k in self.state_dict()
                       if '.gamma1.' in k or '.gamma2.' in k)
        if self.stem == 'conv':
            names += ('patch_embed.layers.', )
        return names

    def adapt_host_state_dict(self, state_dict):
        """Refuse a checkpoint that needs layer scale or the conv stem.

        Args:
            state_dict (dict): ``{name: tensor}`` in our names.

        Returns:
            tuple: as :meth:`PretrainedMixin.adapt_host_state_dict`.
        """
        own = self.state_dict()
        needs = []
        if any('.gamma1.' in k for k in state_dict) and \
                not any('.gamma1.' in k for k in own):
            needs.append('layer_scale=1e-5')
        if any(k.startswith('patch_embed.layers.') for k in state_dict) \
                and self.stem != 'conv':
            needs.append("stem='conv'")
        if needs:
            raise ValueError(
                f"{type(self).__name__}: the checkpoint is in the authors' "
                f"STViT-R layout, which this model cannot hold; build it "
                f"with {', '.join(needs)} (configs/"
                f"stvit_r_swin_s_authors_in1k.py sets the authors' layout)")
        return state_dict, (), None

    def forward(self, x):
        """As :meth:`SwinBase.forward`, with either stem.

        Args:
            x (Tensor): images ``(B, C_in, H, W)``, any size.

        Returns:
            tuple[Tensor]: NCHW maps of ``out_indices``.
        """
        check_in_channels(x, self.swin_cfg['in_channels'], 4)
        return tuple(SwinTransformer.forward(self, x))
