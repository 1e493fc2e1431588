"""STViT-R on Swin: dumbbell units of semantic tokens in stage 3.

Paper: Chang et al., *Making Vision Transformers Efficient from A Token
Sparsification View* (CVPR 2023). Layout and defaults follow the authors'
released detection code; ``docs/stvit_design.md`` records the facts, and
where we differ (padding is masked everywhere, so outputs do not depend on
it).
"""
from mmengine.model import ModuleList

from ...ops import pad_to_multiple, window_reverse
from ...registry import MODELS
from ..layers import MaskedWindowSwinBlock
from ..layers.semantic_swin_stage import SemanticSwinBlockSequence
from ..utils import check_int
from .stvit_swin import SemanticSwinTransformer

#: roles of the 6 blocks of a dumbbell unit
UNIT_LAYOUT = ('image', 'stgm1', 'stgm2', 'semantic_local', 'semantic_global',
               'recovery')


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
        **kwargs: ``window_size``, ``semantic_window``, ``key_windows``,
            ``pooling``, ``embed_dims``, ``global_centres`` of
            :class:`SemanticSwinBlockSequence` (one STGM per unit).
    """

    def __init__(self, blocks, downsample, num_units, recovery_window,
                 mask_padding, **kwargs):
        super().__init__(blocks, num_stgm=num_units, **kwargs)
        self.downsample = downsample
        self.num_units = num_units
        self.recovery_window = recovery_window
        self.mask_padding = mask_padding

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
                 **kwargs):
        super().__init__(arch, dumbbell_stage, semantic_window, key_windows,
                         pooling, stgm2_keys, key_region, **kwargs)
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
            else:
                blocks.append(self.cross_attention_block(dumbbell_stage, old))
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
            stgm2_keys=stgm2_keys,
            key_region=key_region)
