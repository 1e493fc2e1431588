"""The Swin stages of STViT and STViT-R that carry semantic tokens."""
import functools

import torch
import torch.nn as nn
from mmengine.model import BaseModule, ModuleList
from mmengine.model.weight_init import trunc_normal_

from mmvitaccel.ops import (IntraInterPooling, covered_tokens_mask,
                            mask_or_none, neighbourhood_mask,
                            neighbourhood_windows, pad_to_multiple,
                            pool_centres, region_windows_with_tokens,
                            regions_all_valid, semantic_all_valid,
                            window_partition, window_reverse)
# re-exported build-time checks
from mmvitaccel.models.stvit.semantic_checks import (STGM2_KEYS,
                                                     check_semantic_windows,
                                                     check_stgm_fits,
                                                     check_stgm_keys,
                                                     resolve_stgm_index)  # noqa: F401

#: regions holding this share of the map attend to it masked, not gathered
DENSE_REGION_SHARE = 0.5


class SemanticSwinBlockSequence(BaseModule):
    """Pooling, ``G``, STGM and semantic attention of a Swin stage; subclasses
    arrange the blocks.

    Args:
        blocks (ModuleList): the stage's blocks (Swin names ``blocks.{i}``).
        num_stgm (int): number of STGMs in the stage.
        window_size (int): Swin window ``w``.
        semantic_window (int): ``w_s``, semantic tokens per window side.
        key_windows (tuple[int, int]): ``(k1, k2)``, key region sides of
            STGM-1 and STGM-2.
        pooling (str): ``'max'``, ``'avg'`` or ``'intra_inter'``.
        embed_dims (int): channels ``C`` of the stage.
        global_centres (bool): add learnable ``G`` to the STGM-2 queries.
        stgm2_keys (str): ``'semantic_and_image'`` (``Concat(S1, X)``, Eq. 3)
            or ``'image'``.
        key_region (str): ``'inside'`` (moved inside the map) or
            ``'centred'`` (clipped to the map).
    """

    def __init__(self, blocks, num_stgm, window_size, semantic_window,
                 key_windows, pooling, embed_dims, global_centres,
                 stgm2_keys='semantic_and_image', key_region='inside'):
        super().__init__()
        check_stgm_keys(stgm2_keys, key_region)
        self.stgm2_keys = stgm2_keys
        self.key_region = key_region
        self.blocks = blocks
        self.window_size = window_size
        self.semantic_window = semantic_window
        self.key_windows = tuple(key_windows)
        self.pooling = pooling
        window = (window_size, window_size)
        out = (semantic_window, semantic_window)
        self.poolers = ModuleList([
            IntraInterPooling(embed_dims, window, out)
            for _ in range(num_stgm)
        ]) if pooling == 'intra_inter' else None
        self._fixed_pooling = None if pooling == 'intra_inter' else \
            functools.partial(pool_centres, window=window, out=out,
                              mode=pooling)
        self.global_centres = nn.ParameterList([
            nn.Parameter(torch.zeros(1, semantic_window**2, embed_dims))
            for _ in range(num_stgm)
        ]) if global_centres else None

    def init_new_parameters(self):
        """Init pooling (as average pooling) and ``G`` (trunc normal .02)."""
        if self.poolers is not None:
            for pooler in self.poolers:
                pooler.reset_parameters()
        if self.global_centres is not None:
            for g in self.global_centres:
                trunc_normal_(g, std=.02)

    def generate(self, g, stgm1, stgm2, x, valid, hw=None):
        """STGM ``g``: semantic tokens of every window of a padded map.

        Args:
            g (int): index of the STGM (its pooling and ``G``).
            stgm1 (CrossAttentionSwinBlock): STGM layer 1.
            stgm2 (CrossAttentionSwinBlock): STGM layer 2.
            x (Tensor): ``(B, Hp, Wp, C)``, sides multiples of the window.
            valid (Tensor): ``(Hp, Wp)`` bool, False on padding.
            hw (tuple[int, int], optional): the real ``(H, W)`` (host masks).

        Returns:
            tuple[Tensor, Tensor, Tensor]: windows ``(B * nW, w * w, C)``,
            semantic tokens ``(B * nW, w_s * w_s, C)``, their validity
            ``(nW, w_s * w_s)``.
        """
        w = self.window_size
        nh, nw = x.shape[1] // w, x.shape[2] // w
        windows = window_partition(x, w)  # (B*nW, w*w, C)
        valid_w = window_partition(valid, w)  # (nW, w*w)
        # P = pool(X) per window
        pool = self.poolers[g] if self.poolers is not None else \
            self._fixed_pooling
        centres, sem_valid = pool(windows, valid=valid_w)
        sem_valid = sem_valid[:nh * nw]  # the same for every image
        # STGM-1: S1 = MHA(P, X_k1, X_k1) + P
        sem = self.attend_regions(stgm1, centres, stgm1.key_values(x), valid,
                                  w, self.key_windows[0],
                                  placement=self.key_region, hw=hw)
        # STGM-2 (Eq. 3): S2 = MHA(S1 + G, [S1; X_k2], [S1; X_k2]) + S1
        query = sem if self.global_centres is None else \
            sem + self.global_centres[g]
        semantic = None
        if self.stgm2_keys == 'semantic_and_image':
            s = self.semantic_window
            semantic = (window_reverse(stgm2.key_values(sem), s, nh * s,
                                       nw * s),
                        window_reverse(sem_valid[..., None], s, nh * s,
                                       nw * s)[0, ..., 0])
        sem = self.attend_regions(stgm2, query, stgm2.key_values(x), valid,
                                  w, self.key_windows[1], shortcut=sem,
                                  placement=self.key_region,
                                  semantic=semantic, hw=hw)
        return windows, sem, sem_valid

    @staticmethod
    def attend_regions(block, queries, kv_map, valid, window, size,
                       shortcut=None, placement='centred', semantic=None,
                       hw=None):
        """Each window's queries attend to the ``size x size`` region around.

        ``MHA(q, K_r, V_r) + q``, FFN; with ``semantic``, keys ``[S_r; X_r]``
        (Eq. 3). Regions holding ``>= DENSE_REGION_SHARE`` of the map attend to
        the whole map under a per-query mask; smaller ones are gathered.

        Args:
            block (CrossAttentionSwinBlock): the attending block.
            queries (Tensor): ``(B * nW, Lq, C)``, windows in
                :func:`~mmvitaccel.ops.window_partition` order.
            kv_map (Tensor): ``(B, Hp, Wp, 2C)`` projected keys and values.
            valid (Tensor): ``(Hp, Wp)`` bool, False on padding.
            window (int): window side on the map.
            size (int): region side, ``>= window``.
            shortcut (Tensor, optional): residual, default ``queries``.
            placement (str): ``'centred'`` or ``'inside'``.
            semantic (tuple[Tensor, Tensor], optional): per-window tokens
                ``(B, nh * t, nw * t, 2C)`` and validity ``(nh * t, nw * t)``.
            hw (tuple[int, int], optional): real extent of ``valid``.

        Returns:
            Tensor: ``(B * nW, Lq, C)``.
        """
        B, H, W, C2 = kv_map.shape
        dense = min(size, H) * min(size, W) >= DENSE_REGION_SHARE * H * W
        all_valid = regions_all_valid(
            hw, (H, W), window, size, placement,
            None if semantic is None else semantic[0].shape[1] * window // H,
            dense)
        if not dense:
            if semantic is None:
                kv, key_valid = neighbourhood_windows(kv_map, valid, window,
                                                      size, placement)
            else:  # the covered tokens, then the region: one gather
                kv, key_valid = region_windows_with_tokens(
                    kv_map, valid, *semantic, window, size, placement,
                    hw=hw)
            return block(queries, kv, mask_or_none(key_valid, all_valid),
                         shortcut)
        N, Lq, C = queries.shape
        kv = kv_map.reshape(B, H * W, C2)
        mask = neighbourhood_mask(valid, window, size, placement)
        if semantic is not None:
            grid, grid_valid = semantic
            t = grid.shape[1] * window // H
            kv = torch.cat((grid.reshape(B, -1, C2), kv), dim=1)
            mask = torch.cat(
                (covered_tokens_mask(valid, window, size, t, placement)
                 & grid_valid.reshape(1, -1), mask), dim=1)
        mask = mask_or_none(mask, all_valid)
        if mask is not None:  # (nW, Lk) -> one row per query, (1, nW*Lq, Lk)
            mask = mask.repeat_interleave(Lq, dim=0)[None]
        out = block(queries.reshape(B, -1, C), kv, mask,
                    None if shortcut is None else shortcut.reshape(B, -1, C))
        return out.view(N, Lq, C)

    @staticmethod
    def attend_local(block, sem, sem_valid, all_valid=None):
        """Semantic local block: ``S = MHA(S_win, S_win, S_win) + S_win``, FFN.

        Args:
            block (CrossAttentionSwinBlock): the block.
            sem (Tensor): ``(B * nW, w_s * w_s, C)``.
            sem_valid (Tensor): ``(nW, w_s * w_s)`` bool.
            all_valid (bool, optional): ``sem_valid`` is all True (host-known).

        Returns:
            Tensor: ``(B * nW, w_s * w_s, C)``.
        """
        return block(sem, block.key_values(sem),
                     mask_or_none(sem_valid, all_valid))

    @staticmethod
    def attend_global(block, sem, sem_valid, all_valid=None):
        """Semantic global block: ``S = MHA(S, S, S) + S``, FFN.

        Args:
            block (CrossAttentionSwinBlock): the block.
            sem (Tensor): ``(B, L, C)`` (any token order).
            sem_valid (Tensor): ``(L, )`` bool, in the same order.
            all_valid (bool, optional): as in :meth:`attend_local`.

        Returns:
            Tensor: ``(B, L, C)``.
        """
        return block(sem, block.key_values(sem),
                     mask_or_none(sem_valid.reshape(1, -1), all_valid))


class STViTSwinBlockSequence(SemanticSwinBlockSequence):
    """STViT's semantic stage: Swin ``blocks[:i]``, STGM, then semantic blocks
    (local, global, ...); ``expand`` replaces the patch merging.

    Args:
        blocks (ModuleList): all blocks of the stage.
        expand (nn.Module | None): ``Linear(C, 2C)`` or None.
        stgm_index (int): ``i``, the block index of STGM-1.
        **kwargs: :class:`SemanticSwinBlockSequence`'s, but ``num_stgm``.
    """

    def __init__(self, blocks, expand, stgm_index, **kwargs):
        super().__init__(blocks, num_stgm=1, **kwargs)
        self.expand = expand
        self.stgm_index = stgm_index

    def forward(self, x, hw_shape):
        """Image tokens in, semantic tokens out.

        Args:
            x (Tensor): ``(B, H * W, C)`` image tokens.
            hw_shape (tuple[int, int]): ``(H, W)``.

        Returns:
            tuple: ``(x_down, grid_shape, out, grid_shape, valid)``: tokens
            ``(B, s_H * s_W, 2C)`` after ``expand``, ``(B, s_H * s_W, C)``
            before, in raster order on the grid
            ``(s_H, s_W) = (Hp / w * w_s, Wp / w * w_s)``; validity
            ``(s_H * s_W, )``.
        """
        i, w, s = self.stgm_index, self.window_size, self.semantic_window
        for block in self.blocks[:i]:
            x = block(x, hw_shape)
        B, _, C = x.shape
        x, valid = pad_to_multiple(x.view(B, *hw_shape, C), w)
        grid_shape = (x.shape[1] // w * s, x.shape[2] // w * s)
        _, sem, sem_valid = self.generate(0, self.blocks[i],
                                          self.blocks[i + 1], x, valid,
                                          hw=hw_shape)
        all_valid = semantic_all_valid(hw_shape, x.shape[1:3], w, s)
        for j, block in enumerate(self.blocks[i + 2:]):
            if j % 2 == 0:
                sem = self.attend_local(block, sem, sem_valid, all_valid)
            else:
                sem = self.attend_global(block, sem.view(B, -1, C),
                                         sem_valid, all_valid).view_as(sem)
        out = window_reverse(sem, s, *grid_shape).view(B, -1, C)
        valid = window_reverse(sem_valid[..., None], s, *grid_shape)
        valid = valid.view(-1)
        x_down = out if self.expand is None else self.expand(out)
        return x_down, grid_shape, out, grid_shape, valid


class SemanticGlobalBlockSequence(BaseModule):
    """A stage on semantic tokens: global attention, then optional ``expand``.

    Args:
        blocks (ModuleList): :class:`CrossAttentionSwinBlock` s.
        expand (nn.Module | None): ``Linear(C, 2C)`` or None.
    """

    def __init__(self, blocks, expand=None):
        super().__init__()
        self.blocks = blocks
        self.expand = expand

    def forward(self, x, grid_shape, valid, all_valid=None):
        """Args:
            x (Tensor): ``(B, L, C)`` semantic tokens.
            grid_shape (tuple[int, int]): their grid, ``s_H * s_W = L``.
            valid (Tensor): ``(L, )`` bool.
            all_valid (bool, optional): ``valid`` is all True (host-known).

        Returns:
            tuple: as :meth:`STViTSwinBlockSequence.forward`.
        """
        for block in self.blocks:
            x = SemanticSwinBlockSequence.attend_global(block, x, valid,
                                                        all_valid)
        x_down = x if self.expand is None else self.expand(x)
        return x_down, grid_shape, x, grid_shape, valid


def build_semantic_stages(stages, semantic_stage, stgm_index, dims,
                          cross_block, semantic_sequence):
    """Turn a Swin's stages from ``semantic_stage`` on into STViT's, in place.

    Args:
        stages (ModuleList): the host's stages (``blocks``, ``downsample``).
        semantic_stage (int): the first stage with semantic tokens.
        stgm_index (int): the block of ``semantic_stage`` that is STGM-1.
        dims (Sequence[int]): the channels of each stage.
        cross_block (Callable[[int, nn.Module], nn.Module]): stage index and
            upstream block -> its cross-attention block.
        semantic_sequence (Callable): ``(stage, blocks, expand)`` -> the
            semantic stage module.
    """
    for i in range(semantic_stage, len(stages)):
        stage = stages[i]
        expand = None if stage.downsample is None else nn.Linear(
            dims[i], 2 * dims[i])
        blocks = ModuleList([
            old if i == semantic_stage and j < stgm_index else
            cross_block(i, old) for j, old in enumerate(stage.blocks)
        ])
        stages[i] = semantic_sequence(stage, blocks, expand) \
            if i == semantic_stage else \
            SemanticGlobalBlockSequence(blocks, expand)
