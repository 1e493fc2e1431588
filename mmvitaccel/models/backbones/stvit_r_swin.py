"""STViT-R on Swin: dumbbell units of semantic tokens in stage 3.

Paper: Chang et al., *Making Vision Transformers Efficient from A Token
Sparsification View* (CVPR 2023). Layout and defaults follow the authors'
released detection code; ``docs/stvit_design.md`` records the facts, and
where we differ (padding is masked everywhere, so outputs do not depend on
it).
"""
import inspect

import torch
import torch.nn as nn
from mmdet.models.backbones.swin import SwinTransformer
from mmengine.model import BaseModule, ModuleList
from mmengine.model.weight_init import trunc_normal_

from ...ops import (IntraInterPooling, neighbourhood_windows, pad_to_multiple,
                    pool_centres, window_partition, window_reverse)
from ...registry import MODELS
from ..layers import CrossAttentionSwinBlock, MaskedWindowSwinBlock
from ..utils import load_with_report, swin_state_dict

#: embed_dims, depths, num_heads of the Swin sizes
SWIN_ARCHS = {
    'tiny': dict(embed_dims=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24)),
    'small': dict(embed_dims=96, depths=(2, 2, 18, 2),
                  num_heads=(3, 6, 12, 24)),
    'base': dict(embed_dims=128, depths=(2, 2, 18, 2),
                 num_heads=(4, 8, 16, 32)),
}

#: roles of the 6 blocks of a dumbbell unit
UNIT_LAYOUT = ('image', 'stgm1', 'stgm2', 'semantic_local', 'semantic_global',
               'recovery')

POOLINGS = ('max', 'avg', 'intra_inter')


class DumbbellSwinBlockSequence(BaseModule):
    """A Swin stage whose first ``6 * num_units`` blocks form dumbbell units.

    One unit, with ``X`` the image tokens of the padded map and ``S`` the
    semantic tokens (``w_s x w_s`` per ``w x w`` window):

    1. image block: ``X = W-MSA(X)`` (padded keys masked);
    2. STGM-1: ``P = pool(X)`` per window, ``S1 = MHA(P, X_k1, X_k1) + P``
       with ``X_k1`` the ``k1 x k1`` region around the window;
    3. STGM-2: ``S2 = MHA(S1 + G, X_k2, X_k2) + S1`` (``G`` optional);
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
        window_size (int): Swin window ``w``.
        semantic_window (int): ``w_s``, semantic tokens per window side.
        key_windows (tuple[int, int]): ``(k1, k2)``, STGM key regions.
        recovery_window (int): ``r``, semantic neighbourhood of recovery.
        pooling (str): ``'max'``, ``'avg'`` or ``'intra_inter'``.
        embed_dims (int): channels, for the learnable parts.
        global_centres (bool): add learnable global centres ``G`` to the
            STGM-2 queries.
        mask_padding (bool): mask padded image tokens in the image blocks.
    """

    def __init__(self, blocks, downsample, num_units, window_size,
                 semantic_window, key_windows, recovery_window, pooling,
                 embed_dims, global_centres, mask_padding):
        super().__init__()
        self.blocks = blocks
        self.downsample = downsample
        self.num_units = num_units
        self.window_size = window_size
        self.semantic_window = semantic_window
        self.key_windows = tuple(key_windows)
        self.recovery_window = recovery_window
        self.pooling = pooling
        self.mask_padding = mask_padding
        window = (window_size, window_size)
        out = (semantic_window, semantic_window)
        self.poolers = ModuleList([
            IntraInterPooling(embed_dims, window, out)
            for _ in range(num_units)
        ]) if pooling == 'intra_inter' else None
        self.global_centres = nn.ParameterList([
            nn.Parameter(torch.zeros(1, semantic_window**2, embed_dims))
            for _ in range(num_units)
        ]) if global_centres else None

    def init_new_parameters(self):
        """Initialise what STViT adds to Swin: learnable pooling starts as
        average pooling, global centres ``G`` are Gaussian."""
        if self.poolers is not None:
            for pooler in self.poolers:
                pooler.reset_parameters()
        if self.global_centres is not None:
            for g in self.global_centres:
                trunc_normal_(g, std=.02)

    def _unit(self, u, x, valid):
        """Run dumbbell unit ``u`` on the padded map ``x (B, Hp, Wp, C)``."""
        img, stgm1, stgm2, local, glob, recovery = self.blocks[6 * u:6 * u +
                                                               6]
        w, s = self.window_size, self.semantic_window
        B, Hp, Wp, C = x.shape
        nh, nw = Hp // w, Wp // w
        x = img(x, valid if self.mask_padding else None)
        windows = window_partition(x, w)  # (B*nW, w*w, C)
        valid_w = window_partition(valid, w)  # (nW, w*w)
        # initial cluster centres P (B*nW, s*s, C)
        if self.poolers is not None:
            centres, sem_valid = self.poolers[u](windows, valid_w)
        else:
            centres, sem_valid = pool_centres(windows, (w, w), (s, s),
                                              self.pooling, valid_w)
        sem_valid = sem_valid[:nh * nw]  # (nW, s*s), same for every image
        # STGM-1: S1 = MHA(P, X_k1, X_k1) + P; keys/values are projected
        # once on the map, then gathered per window
        kv, key_valid = neighbourhood_windows(
            stgm1.key_values(x), valid, w, self.key_windows[0])
        sem = stgm1(centres, kv, key_valid)
        # STGM-2: S2 = MHA(S1 + G, X_k2, X_k2) + S1
        kv, key_valid = neighbourhood_windows(
            stgm2.key_values(x), valid, w, self.key_windows[1])
        query = sem if self.global_centres is None else \
            sem + self.global_centres[u]
        sem = stgm2(query, kv, key_valid, shortcut=sem)
        # semantic blocks: local (one window's s*s tokens), then global
        sem = local(sem, local.key_values(sem), sem_valid)
        sem = sem.reshape(B, -1, C)
        sem = glob(sem, glob.key_values(sem), sem_valid.reshape(1, -1))
        sem = sem.view(B * nh * nw, s * s, C)
        # recovery: X = MHA(X, S_r, S_r) + X on the semantic grid
        grid = window_reverse(recovery.key_values(sem), s, nh * s, nw * s)
        grid_valid = window_reverse(sem_valid[..., None].float(), s, nh * s,
                                    nw * s)[0, ..., 0] > 0.5
        kv, key_valid = neighbourhood_windows(grid, grid_valid, s,
                                              self.recovery_window)
        windows = recovery(windows, kv, key_valid)
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
class STViTRSwinTransformer(SwinTransformer):
    """STViT-R: Swin with dumbbell units of semantic tokens in one stage.

    A drop-in for mmdet's ``SwinTransformer`` (same 4-level NCHW pyramid,
    same parameter names, so FPN/UperNet and Swin checkpoints work
    unchanged). Stage ``dumbbell_stage`` (stage 3 by default) is regrouped
    into units of 6 blocks, ``[image, STGM-1, STGM-2, semantic local,
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
        key_windows (tuple[int, int]): ``w_k`` of STGM-1 and STGM-2; the
            authors' detection code uses 14 and 21.
        recovery_window (int): semantic neighbourhood of each image window
            in the recovery block; 27 in the authors' detection code.
        pooling (str): initial centres: ``'max'`` (the authors'), ``'avg'``
            or ``'intra_inter'`` (the paper's learnable pooling).
        global_centres (bool): learnable global centres ``G`` added to the
            STGM-2 queries; off for Swin, as in the released runs.
        mask_padding (bool): mask padded tokens in the units' image blocks
            too (True: padding invariant; False: as upstream Swin).
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
                 **kwargs):
        if arch is not None:
            if arch not in SWIN_ARCHS:
                raise ValueError(f'unknown arch {arch!r}; choose from '
                                 f'{sorted(SWIN_ARCHS)}')
            kwargs.update(SWIN_ARCHS[arch])
        args = inspect.signature(SwinTransformer.__init__).bind(
            None, **kwargs)
        args.apply_defaults()
        cfg = args.arguments
        depth = cfg['depths'][dumbbell_stage]
        window = cfg['window_size']
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
        if pooling not in POOLINGS:
            raise ValueError(f'unknown pooling {pooling!r}; choose from '
                             f'{POOLINGS}')
        if not 1 <= semantic_window <= window:
            raise ValueError(f'semantic_window must be in 1..{window} (the '
                             f'window size), got {semantic_window}')
        if len(key_windows) != 2 or min(key_windows) < window:
            raise ValueError(f'key_windows must be two sizes >= the window '
                             f'size {window}, got {key_windows}')
        if recovery_window < semantic_window:
            raise ValueError(f'recovery_window {recovery_window} is smaller '
                             f'than semantic_window {semantic_window}')
        super().__init__(**kwargs)
        self.dumbbell_stage = dumbbell_stage

        stage = self.stages[dumbbell_stage]
        dims = self.num_features[dumbbell_stage]
        block_args = dict(
            embed_dims=dims,
            num_heads=cfg['num_heads'][dumbbell_stage],
            feedforward_channels=int(cfg['mlp_ratio'] * dims),
            qkv_bias=cfg['qkv_bias'],
            qk_scale=cfg['qk_scale'],
            drop_rate=cfg['drop_rate'],
            attn_drop_rate=cfg['attn_drop_rate'],
            act_cfg=cfg['act_cfg'],
            norm_cfg=cfg['norm_cfg'],
            with_cp=cfg['with_cp'])
        blocks = ModuleList()
        for i, old in enumerate(stage.blocks):
            if i >= 6 * num_units:
                blocks.append(old)
                continue
            drop_path = old.attn.drop.drop_prob
            if UNIT_LAYOUT[i % 6] == 'image':
                blocks.append(
                    MaskedWindowSwinBlock(
                        window_size=window,
                        drop_path_rate=drop_path,
                        **block_args))
            else:
                blocks.append(
                    CrossAttentionSwinBlock(
                        drop_path_rate=drop_path, **block_args))
        self.stages[dumbbell_stage] = DumbbellSwinBlockSequence(
            blocks=blocks,
            downsample=stage.downsample,
            num_units=num_units,
            window_size=window,
            semantic_window=semantic_window,
            key_windows=key_windows,
            recovery_window=recovery_window,
            pooling=pooling,
            embed_dims=dims,
            global_centres=global_centres,
            mask_padding=mask_padding)

    #: reads a host (Swin) checkpoint in any supported layout into our names
    host_state_dict = staticmethod(swin_state_dict)

    @property
    def new_parameter_prefixes(self):
        """Names of the parameters STViT-R adds to Swin."""
        stage = f'stages.{self.dumbbell_stage}.'
        return (stage + 'poolers.', stage + 'global_centres.')

    def init_weights(self):
        """Initialise from scratch as mmdet's Swin does, or load a Swin
        checkpoint (official, mmdet/mmseg or mmpretrain layout) given as
        ``init_cfg=dict(type='Pretrained', checkpoint=...)``, with a report
        of new, missing, unused and mismatched keys."""
        stage = self.stages[self.dumbbell_stage]
        if self.init_cfg is not None and \
                self.init_cfg.get('type') == 'Pretrained':
            state_dict = self.host_state_dict(self.init_cfg['checkpoint'])
            stage.init_new_parameters()
            self.load_report = load_with_report(self, state_dict,
                                                self.new_parameter_prefixes)
        else:
            super().init_weights()
            stage.init_new_parameters()

    def forward(self, x):
        """Swin's forward, with the feature maps as a tuple.

        Args:
            x (Tensor): images ``(B, 3, H, W)``, any size.

        Returns:
            tuple[Tensor]: ``(B, C_i, H_i, W_i)`` for each of
            ``out_indices`` (a tuple, which mmpretrain's necks need; mmdet
            and mmseg take it too).
        """
        return tuple(super().forward(x))
