"""STViT-R stage: dumbbell units, Table 9 ablations (stvit_design.md §14)."""
import contextlib

import torch.nn as nn
from mmengine.model import ModuleList

from mmvitaccel.ops import (pad_to_multiple, semantic_all_valid,
                            semantic_extent, unpadded, window_reverse)
from mmvitaccel.models.stvit.semantic_swin_stage import (
                                                         SemanticSwinBlockSequence)
from mmvitaccel.models.stvit.stvit_authors import authors_stgm

#: roles of the 6 blocks of a dumbbell unit
UNIT_LAYOUT = ('image', 'stgm1', 'stgm2', 'semantic_local', 'semantic_global',
               'recovery')

#: what the later units of ``semantic_reuse`` take as initial centres
REUSE_SOURCES = ('previous_unit', 'first_stgm')


def stage_roles(layout, depth, num_units=0, stgm_index=None,
                num_recovery=1):
    """The role of every block of an STViT-R stage of ``depth`` blocks.

    Roles: ``'swin'`` (upstream block, its shift kept), ``'image'`` (unshifted,
    padding-masked), ``'stgm1'``, ``'stgm2'``, ``'semantic_local'``,
    ``'semantic_global'``, ``'recovery'``.

    Args:
        layout (str): ``'dumbbell'``: ``num_units`` units of
            :data:`UNIT_LAYOUT`, then ``'swin'``; ``'single'``: ``'swin'`` up
            to ``stgm_index``, the STGM, semantic blocks, then recovery.
        depth (int): blocks in the stage.
        num_units (int): ``'dumbbell'`` only.
        stgm_index (int | None): ``'single'`` only, 0-based STGM-1 block.
        num_recovery (int): ``'single'`` only, recovery blocks at the end.

    Returns:
        tuple[str]: one role per block.
    """
    if layout == 'dumbbell':
        return UNIT_LAYOUT * num_units + ('swin', ) * (depth - 6 * num_units)
    semantic = depth - stgm_index - 2 - num_recovery
    return (('swin', ) * stgm_index + ('stgm1', 'stgm2') + tuple(
        ('semantic_local', 'semantic_global')[j % 2]
        for j in range(semantic)) + ('recovery', ) * num_recovery)


class DumbbellSwinBlockSequence(SemanticSwinBlockSequence):
    """A Swin stage whose first ``6 * num_units`` blocks form dumbbell units.

    One unit (``X`` image tokens of the padded map, ``S`` semantic tokens),
    each block followed by its FFN:

    1. image: ``X = W-MSA(X)``, padded keys masked;
    2. STGM-1: ``P = pool(X)``, ``S1 = MHA(P, X_k1, X_k1) + P``;
    3. STGM-2: ``S2 = MHA(S1 + G, [S1; X_k2], [S1; X_k2]) + S1``;
    4. semantic local: attention among a window's ``w_s x w_s`` tokens;
    5. semantic global: attention among all semantic tokens;
    6. recovery: ``X = MHA(X, S_r, S_r) + X``, ``S_r`` the ``r x r``
       semantic neighbourhood of the window.

    ``semantic_reuse``: unit ``u > 0`` takes ``P`` from unit ``u - 1``'s
    semantic tokens or the first unit's ``S2`` (Table 9).

    Args:
        blocks (ModuleList): all blocks of the stage, dumbbells first.
        downsample (nn.Module | None): the patch merging after the stage.
        num_units (int): dumbbell units at the start of ``blocks``.
        recovery_window (int): ``r``, semantic neighbourhood of recovery.
        mask_padding (bool): mask padded image tokens in the image blocks.
        stgm_form (str): ``'paper'`` (above) or ``'authors'``
            (:meth:`generate_authors`).
        centre_units (str): ``'all'`` or ``'first'``: units that add ``G``.
        kv_per_region (bool): ``'authors'`` only: project keys/values per
            gathered region (their cost, same values).
        semantic_reuse (bool): generate the initial centres once.
        reuse_from (str): one of :data:`REUSE_SOURCES`.
        **kwargs: :class:`SemanticSwinBlockSequence`'s (one STGM per unit).
    """

    def __init__(self, blocks, downsample, num_units, recovery_window,
                 mask_padding, stgm_form='paper', centre_units='all',
                 kv_per_region=False, semantic_reuse=False,
                 reuse_from='previous_unit', **kwargs):
        super().__init__(blocks, num_stgm=num_units, **kwargs)
        self.downsample = downsample
        self.num_units = num_units
        self.recovery_window = recovery_window
        self.mask_padding = mask_padding
        self.stgm_form = stgm_form
        self.kv_per_region = kv_per_region
        self.semantic_reuse = semantic_reuse
        self.reuse_from = reuse_from
        if centre_units == 'first' and self.global_centres is not None:
            self.global_centres = nn.ParameterList(
                list(self.global_centres)[:1])
        if semantic_reuse and self.poolers is not None:
            self.poolers = ModuleList(list(self.poolers)[:1])

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

    @contextlib.contextmanager
    def _given_initial_centres(self, initial):
        """Make the pooling return ``initial = (P, valid)``."""
        if initial is None:
            yield
            return
        poolers, fixed = self.poolers, self._fixed_pooling
        self.poolers = None
        self._fixed_pooling = lambda windows, valid: initial
        try:
            yield
        finally:
            self.poolers, self._fixed_pooling = poolers, fixed

    def generate(self, g, stgm1, stgm2, x, valid, initial=None, hw=None):
        """STGM of unit ``g``, paper or authors' form; ``initial``: reused
        ``(P, valid)`` (None: pool ``x``). As
        :meth:`SemanticSwinBlockSequence.generate`.
        """
        with self._given_initial_centres(initial):
            if self.stgm_form == 'authors':
                return self.generate_authors(g, stgm1, stgm2, x, valid, hw)
            if self.global_centres is not None and self._centres(g) is None:
                with self._without_centres():
                    return super().generate(g, stgm1, stgm2, x, valid, hw)
            return super().generate(g, stgm1, stgm2, x, valid, hw)

    def generate_authors(self, g, stgm1, stgm2, x, valid, hw=None):
        """STGM of unit ``g`` in the authors' form (:func:`authors_stgm`)."""
        return authors_stgm(self, g, self._centres(g), stgm1, stgm2, x,
                            valid, hw)

    def attend_semantic(self, blocks, sem, sem_valid, all_valid=None):
        """Semantic blocks alternating local and global (local first).

        Args:
            blocks (Sequence[CrossAttentionSwinBlock]): the blocks.
            sem (Tensor): ``(B * nW, w_s^2, C)``.
            sem_valid (Tensor): ``(nW, w_s^2)`` bool.
            all_valid (bool, optional): ``sem_valid`` is all True (host-known).

        Returns:
            Tensor: ``(B * nW, w_s^2, C)``.
        """
        nW = sem_valid.shape[0]
        for j, block in enumerate(blocks):
            if j % 2 == 0:
                sem = self.attend_local(block, sem, sem_valid, all_valid)
            else:
                shape = sem.shape
                sem = self.attend_global(
                    block, sem.reshape(shape[0] // nW, -1, shape[2]),
                    sem_valid, all_valid).view(shape)
        return sem

    def recover(self, blocks, windows, sem, sem_valid, shape, hw=None):
        """Recovery ``X = MHA(X, S_r, S_r) + X``, each block in turn.

        Args:
            blocks (Sequence[CrossAttentionSwinBlock]): recovery blocks.
            windows (Tensor): image windows ``(B * nW, w * w, C)``.
            sem (Tensor): ``(B * nW, w_s^2, C)``.
            sem_valid (Tensor): ``(nW, w_s^2)`` bool.
            shape (torch.Size): the padded map ``(B, Hp, Wp, C)``.
            hw (tuple[int, int], optional): the real ``(H, W)`` (host masks).

        Returns:
            Tensor: the padded map ``(B, Hp, Wp, C)``.
        """
        w, s = self.window_size, self.semantic_window
        _, Hp, Wp, _ = shape
        nh, nw = Hp // w, Wp // w
        grid_valid = window_reverse(sem_valid[..., None], s, nh * s,
                                    nw * s)[0, ..., 0]
        grid_hw = semantic_extent(hw, (Hp, Wp), w, s)
        for block in blocks:
            grid = window_reverse(block.key_values(sem), s, nh * s, nw * s)
            windows = self.attend_regions(block, windows, grid, grid_valid,
                                          s, self.recovery_window,
                                          hw=grid_hw)
        return window_reverse(windows, w, Hp, Wp)

    def _unit(self, u, x, valid, initial=None, hw=None):
        """Unit ``u``: the map, ``(S2, valid)`` and ``(S, valid)``."""
        img, stgm1, stgm2, local, glob, recovery = self.blocks[6 * u:6 * u +
                                                               6]
        padded_hw = x.shape[1:3]
        x = img(x, valid if self.mask_padding else None,
                unpadded(hw, padded_hw))
        # STGM: P = pool(X) (or reused), S1, S2
        windows, sem, sem_valid = self.generate(u, stgm1, stgm2, x, valid,
                                                initial, hw)
        generated = (sem, sem_valid)
        sem = self.attend_semantic(
            (local, glob), sem, sem_valid,
            semantic_all_valid(hw, padded_hw, self.window_size,
                               self.semantic_window))
        x = self.recover((recovery, ), windows, sem, sem_valid, x.shape, hw)
        return x, generated, (sem, sem_valid)

    def _output(self, x, hw_shape):
        """Swin's stage output, after the patch merging if any."""
        if self.downsample:
            x_down, down_hw_shape = self.downsample(x, hw_shape)
            return x_down, down_hw_shape, x, hw_shape
        return x, hw_shape, x, hw_shape

    def forward(self, x, hw_shape):
        """As mmdet's ``SwinBlockSequence.forward``.

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
            initial = None
            for u in range(self.num_units):
                x, generated, processed = self._unit(u, x, valid, initial,
                                                     (H, W))
                if self.semantic_reuse:
                    if self.reuse_from == 'previous_unit':
                        initial = processed
                    elif u == 0:
                        initial = generated
            x = x[:, :H, :W].reshape(B, H * W, C)
        for block in self.blocks[6 * self.num_units:]:
            x = block(x, hw_shape)
        return self._output(x, hw_shape)


class SingleRecoverySwinBlockSequence(DumbbellSwinBlockSequence):
    """STViT-R without dumbbell units (Table 9).

    Blocks (:func:`stage_roles` ``'single'``): Swin ``blocks[:i]``, STGM,
    semantic blocks, ``num_recovery`` recovery blocks.

    Args:
        blocks (ModuleList): all blocks of the stage.
        downsample (nn.Module | None): the patch merging after the stage.
        stgm_index (int): ``i``, the block index of STGM-1.
        recovery_window (int): ``r``, semantic neighbourhood of recovery.
        **kwargs: :class:`DumbbellSwinBlockSequence`'s but ``num_units``,
            ``mask_padding`` and the reuse options.
    """

    def __init__(self, blocks, downsample, stgm_index, recovery_window,
                 num_recovery=1, **kwargs):
        super().__init__(blocks, downsample, num_units=1,
                         recovery_window=recovery_window, mask_padding=True,
                         **kwargs)
        self.stgm_index = stgm_index
        self.num_recovery = num_recovery

    def forward(self, x, hw_shape):
        """As :meth:`DumbbellSwinBlockSequence.forward`."""
        i = self.stgm_index
        for block in self.blocks[:i]:
            x = block(x, hw_shape)
        B, L, C = x.shape
        H, W = hw_shape
        x, valid = pad_to_multiple(x.view(B, H, W, C), self.window_size)
        windows, sem, sem_valid = self.generate(0, self.blocks[i],
                                                self.blocks[i + 1], x, valid,
                                                hw=(H, W))
        r = len(self.blocks) - self.num_recovery
        sem = self.attend_semantic(
            self.blocks[i + 2:r], sem, sem_valid,
            semantic_all_valid((H, W), x.shape[1:3], self.window_size,
                               self.semantic_window))
        x = self.recover(self.blocks[r:], windows, sem, sem_valid, x.shape,
                         (H, W))
        return self._output(x[:, :H, :W].reshape(B, H * W, C), hw_shape)
