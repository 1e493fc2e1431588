"""STViT-R on Swin: dumbbell units of semantic tokens in stage 3.

Paper: Chang et al., *Making Vision Transformers Efficient from A Token
Sparsification View* (CVPR 2023). Layout and defaults follow the authors'
released detection code; ``docs/stvit_design.md`` records the facts, and
where we differ (padding is masked everywhere, so outputs do not depend on
it).
"""
import contextlib

import torch.nn as nn
from mmdet.models.backbones.swin import ShiftWindowMSA, SwinTransformer
from mmengine.model import ModuleList

from ...ops import check_choice, pad_to_multiple, window_reverse
from ...registry import MODELS
from ..layers import MaskedWindowSwinBlock
from ..layers.semantic_swin_stage import SemanticSwinBlockSequence
from ..layers.stvit_authors import (ConvStem,
                                    LayerScaleCrossAttentionSwinBlock,
                                    UnshiftedSmallMapMSA, authors_stgm)
from ..utils import check_in_channels, check_int
from ..utils.stvit_checkpoint import stvit_r_state_dict
from .stvit_swin import SemanticSwinTransformer

#: roles of the 6 blocks of a dumbbell unit
UNIT_LAYOUT = ('image', 'stgm1', 'stgm2', 'semantic_local', 'semantic_global',
               'recovery')

#: allowed values of the options of the authors' layout
STEMS = ('patch', 'conv')
STGM_FORMS = ('paper', 'authors')
CENTRE_UNITS = ('all', 'first')


class DumbbellSwinBlockSequence(SemanticSwinBlockSequence):
    """A Swin stage whose first ``6 * num_units`` blocks form dumbbell units.

    One unit, with ``X`` the image tokens of the padded map and ``S`` the
    semantic tokens (``w_s x w_s`` per ``w x w`` window):

    1. image block: ``X = W-MSA(X)`` (padded keys masked);
    2. STGM-1: ``P = pool(X)`` per window, ``S1 = MHA(P, X_k1, X_k1) + P``
       with ``X_k1`` the ``k1 x k1`` region around the window;
    3. STGM-2: ``S2 = MHA(S1 + G, [S1; X_k2], [S1; X_k2]) + S1`` (``G``
       optional; ``stgm2_keys='image'``: keys ``X_k2`` only);
    4. semantic local: attention among the ``w_s x w_s`` tokens of a window;
    5. semantic global: attention among all semantic tokens of the image;
    6. recovery: ``X = MHA(X, S_r, S_r) + X``, each image window attending
       to the ``r x r`` neighbourhood of its cell on the semantic grid.

    Every block ends with its FFN. The remaining blocks of the stage run as
    upstream Swin blocks. The stage keeps Swin's module names
    (``blocks.{i}``, ``downsample``) so that Swin checkpoints load.

    Args:
        blocks (ModuleList): all blocks of the stage, dumbbells first.
        downsample (nn.Module | None): the patch merging after the stage.
        num_units (int): dumbbell units at the start of ``blocks``.
        recovery_window (int): ``r``, semantic neighbourhood of recovery.
        mask_padding (bool): mask padded image tokens in the image blocks.
        stgm_form (str): ``'paper'`` (the equations above) or
            ``'authors'`` (the released classification code, see
            :meth:`generate_authors`).
        centre_units (str): ``'all'``: every unit adds its own ``G``;
            ``'first'``: only the first unit has ``G``.
        kv_per_region (bool): ``'authors'`` form only: normalise and project
            the keys/values of every gathered region (the authors' cost)
            instead of projecting the map once and gathering (same values).
        **kwargs: ``window_size``, ``semantic_window``, ``key_windows``,
            ``pooling``, ``embed_dims``, ``global_centres`` of
            :class:`SemanticSwinBlockSequence` (one STGM per unit).
    """

    def __init__(self, blocks, downsample, num_units, recovery_window,
                 mask_padding, stgm_form='paper', centre_units='all',
                 kv_per_region=False, **kwargs):
        super().__init__(blocks, num_stgm=num_units, **kwargs)
        self.downsample = downsample
        self.num_units = num_units
        self.recovery_window = recovery_window
        self.mask_padding = mask_padding
        self.stgm_form = stgm_form
        self.kv_per_region = kv_per_region
        if centre_units == 'first' and self.global_centres is not None:
            self.global_centres = nn.ParameterList(
                list(self.global_centres)[:1])

    def _centres(self, g):
        """``G`` of unit ``g``, or None."""
        if self.global_centres is None or g >= len(self.global_centres):
            return None
        return self.global_centres[g]

    @contextlib.contextmanager
    def _without_centres(self):
        """Hide ``G`` from the paper-form STGM of a unit that has none."""
        centres = self.global_centres
        self.global_centres = None
        try:
            yield
        finally:
            self.global_centres = centres

    def generate(self, g, stgm1, stgm2, x, valid):
        """STGM of unit ``g``: the paper's form
        (:meth:`SemanticSwinBlockSequence.generate`) or the authors'
        (:meth:`generate_authors`); same arguments and returns."""
        if self.stgm_form == 'authors':
            return self.generate_authors(g, stgm1, stgm2, x, valid)
        if self.global_centres is not None and self._centres(g) is None:
            with self._without_centres():
                return super().generate(g, stgm1, stgm2, x, valid)
        return super().generate(g, stgm1, stgm2, x, valid)

    def generate_authors(self, g, stgm1, stgm2, x, valid):
        """STGM of unit ``g`` in the form of the authors' released code:
        :func:`~mmvitaccel.models.layers.stvit_authors.authors_stgm`."""
        return authors_stgm(self, g, self._centres(g), stgm1, stgm2, x,
                            valid)

    def _unit(self, u, x, valid):
        """Run dumbbell unit ``u`` on the padded map ``x (B, Hp, Wp, C)``."""
        img, stgm1, stgm2, local, glob, recovery = self.blocks[6 * u:6 * u +
                                                               6]
        w, s = self.window_size, self.semantic_window
        B, Hp, Wp, C = x.shape
        nh, nw = Hp // w, Wp // w
        x = img(x, valid if self.mask_padding else None)
        # STGM: P = pool(X), S1 = MHA(P, X_k1, X_k1) + P,
        # S2 = MHA(S1 + G, [S1; X_k2], [S1; X_k2]) + S1
        windows, sem, sem_valid = self.generate(u, stgm1, stgm2, x, valid)
        # semantic blocks: local (one window's s*s tokens), then global
        sem = self.attend_local(local, sem, sem_valid)
        sem = self.attend_global(glob, sem.reshape(B, -1, C), sem_valid)
        sem = sem.view(B * nh * nw, s * s, C)
        # recovery: X = MHA(X, S_r, S_r) + X on the semantic grid
        grid = window_reverse(recovery.key_values(sem), s, nh * s, nw * s)
        grid_valid = window_reverse(sem_valid[..., None], s, nh * s,
                                    nw * s)[0, ..., 0]
        windows = self.attend_regions(recovery, windows, grid, grid_valid, s,
                                      self.recovery_window)
        return window_reverse(windows, w, Hp, Wp)

    def forward(self, x, hw_shape):
        """Same contract as mmdet's ``SwinBlockSequence.forward``.

        Args:
            x (Tensor): ``(B, H * W, C)`` tokens.
            hw_shape (tuple[int, int]): ``(H, W)``.

        Returns:
            tuple: ``(x_down, down_hw_shape, x, hw_shape)``.
        """
        if self.num_units:
            B, L, C = x.shape
            H, W = hw_shape
            x, valid = pad_to_multiple(x.view(B, H, W, C), self.window_size)
            for u in range(self.num_units):
                x = self._unit(u, x, valid)
            x = x[:, :H, :W].reshape(B, H * W, C)
        for block in self.blocks[6 * self.num_units:]:
            x = block(x, hw_shape)
        if self.downsample:
            x_down, down_hw_shape = self.downsample(x, hw_shape)
            return x_down, down_hw_shape, x, hw_shape
        return x, hw_shape, x, hw_shape


@MODELS.register_module()
class STViTRSwinTransformer(SemanticSwinTransformer):
    """STViT-R: Swin with dumbbell units of semantic tokens in one stage.

    A drop-in for mmdet's ``SwinTransformer`` (same 4-level NCHW pyramid,
    as a tuple: :meth:`~mmvitaccel.models.utils.SwinBase.forward`; same
    parameter names, so FPN/UperNet and Swin checkpoints work unchanged).
    Stage ``dumbbell_stage`` (stage 3 by default) is regrouped into units
    of 6 blocks, ``[image, STGM-1, STGM-2, semantic local,
    semantic global, recovery]``: Swin-S/B have 3 units in their 18-block
    stage 3, Swin-T one. Any input size works: the stage pads to window
    multiples internally and masks the padding, so outputs do not depend on
    it.

    Args:
        arch (str | None): ``'tiny'``, ``'small'`` or ``'base'`` sets
            ``embed_dims``, ``depths`` and ``num_heads``; None keeps the
            explicit ones.
        dumbbell_stage (int): the stage made of dumbbell units.
        num_units (int | None): how many units (from the start of the
            stage; the blocks after them stay Swin blocks); None: all, which
            needs a depth that is a multiple of 6; 0: plain Swin.
        semantic_window (int): ``w_s``; 3 (9 tokens per window), as the
            paper uses for detection and segmentation.
        key_windows (tuple[int, int]): ``w_k`` of STGM-1 and STGM-2, each
            at least the window size, ``k1 <= k2``; the authors' detection
            code uses 14 and 21.
        recovery_window (int): semantic neighbourhood of each image window
            in the recovery block; 27 in the authors' detection code.
        pooling (str): initial centres: ``'max'`` (the authors'), ``'avg'``
            or ``'intra_inter'`` (the paper's learnable pooling).
        global_centres (bool): learnable global centres ``G`` added to the
            STGM-2 queries; off for Swin, as in the released runs.
        mask_padding (bool): mask padded tokens in the units' image blocks
            too (True: padding invariant; False: as upstream Swin).
        stgm2_keys (str): ``'semantic_and_image'`` (the paper's Eq. 3,
            ``Concat(S1, X)``) or ``'image'`` (the detection code's ``X``);
            see :class:`~mmvitaccel.models.STViTSwinTransformer`.
        key_region (str): ``'centred'`` (the detection code's unfold, where
            14 and 21 come from) or ``'inside'`` (the classification
            code's, for the paper's 10 and 14).
        stem (str): ``'patch'``: Swin's 4x4 patch embedding (the paper's
            Swin); ``'conv'``: the authors' convolutional stem
            (:class:`~mmvitaccel.models.layers.stvit_authors.ConvStem`),
            which their released models use; the paper never mentions a
            stem, but its 5.83 GFLOPs for STViT-R-Swin-S count this one.
        layer_scale (float | None): initial layer scale on the residual
            branches of the units' STGM, semantic and recovery blocks (the
            authors' code: 1e-5 on exactly these blocks, none on Swin's
            window blocks); None: no layer scale.
        stgm_form (str): ``'paper'``: ``S1 = MHA(P, X_k1) + P``,
            ``S2 = MHA(S1 + G, [S1; X_k2]) + S1`` (keys by ``stgm2_keys``,
            regions by ``key_region``); ``'authors'``: their
            released code, ``S1 = MHA(P, [P; X_k1])`` with no residual and
            ``S2 = MHA(S1 + G, [S1; X_k2]) + S1 + G``, regions moved inside
            the map (:meth:`DumbbellSwinBlockSequence.generate_authors`).
        centre_units (str): which units add ``G`` when
            ``global_centres``: ``'all'`` (our reading of the paper, which
            defines ``G`` as part of the STGM, "the global cluster centers
            initialized by Gaussian noise", and every dumbbell unit has an
            STGM) or ``'first'`` (the authors' code adds it in the first
            unit only).
        kv_per_region (bool): with ``stgm_form='authors'``, project the
            keys and values of every gathered region, as their code does
            (same function, the cost their FLOPs count); False: project the
            map once and gather.
        shift_small_maps (bool): True: mmdet's Swin, which shifts a map of
            exactly one window (Swin's last stage at 224 px) under the shift
            mask; False: leave such maps unshifted, as the official Swin
            (and the authors' code) does.
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
                 **kwargs):
        check_choice('stem', stem, STEMS)
        check_choice('stgm_form', stgm_form, STGM_FORMS)
        check_choice('centre_units', centre_units, CENTRE_UNITS)
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
        stage = self.stages[dumbbell_stage]
        depth = len(stage.blocks)
        if num_units is None:
            if depth == 0 or depth % 6:
                raise ValueError(
                    f'stage {dumbbell_stage} has {depth} blocks: room for at '
                    f'most {depth // 6} dumbbell units of 6 and '
                    f'{depth % 6} left over; set num_units explicitly')
            num_units = depth // 6
        if not 0 <= num_units <= depth // 6:
            raise ValueError(
                f'stage {dumbbell_stage} has {depth} blocks: room for at most '
                f'{depth // 6} dumbbell units of 6, not {num_units}')
        window = self.swin_cfg['window_size']
        blocks = ModuleList()
        for i, old in enumerate(stage.blocks):
            if i >= 6 * num_units:
                blocks.append(old)
            elif UNIT_LAYOUT[i % 6] == 'image':
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
        self.stages[dumbbell_stage] = DumbbellSwinBlockSequence(
            blocks=blocks,
            downsample=stage.downsample,
            num_units=num_units,
            recovery_window=recovery_window,
            mask_padding=mask_padding,
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

    #: reads official/mmdet/mmpretrain Swin and the authors' STViT-R layout
    host_state_dict = staticmethod(stvit_r_state_dict)

    @property
    def new_parameter_prefixes(self):
        """Names of the parameters STViT-R adds to a Swin checkpoint: the
        STGM's, the layer scales and the convolutional stem."""
        names = tuple(super().new_parameter_prefixes)
        names += tuple(k for k in self.state_dict()
                       if '.gamma1.' in k or '.gamma2.' in k)
        if self.stem == 'conv':
            names += ('patch_embed.layers.', )
        return names

    def adapt_host_state_dict(self, state_dict):
        """Refuse a checkpoint whose layout needs options this model lacks
        (layer scale, the convolutional stem), naming them.

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
