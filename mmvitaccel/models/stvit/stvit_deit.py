"""STViT on DeiT: semantic tokens mid-network (stvit_design.md §7)."""
import math

import torch
import torch.nn as nn
from mmengine.model.weight_init import trunc_normal_
from mmpretrain.models.backbones import VisionTransformer

from mmvitaccel.ops import IntraInterPooling, check_pooling, pool_centres
from mmvitaccel.registry import MODELS
from mmvitaccel.models.stvit.semantic_vit_layer import CrossAttentionViTLayer
from mmvitaccel.models.utils import (DEIT_ARCHS, PretrainedMixin,
                                     deit_state_dict)
from mmvitaccel.models.utils.vit import (FrozenStagesMixin, embed_tokens,
                                         run_layers, vit_layer_cfgs)



@MODELS.register_module()
class STViTDeiT(PretrainedMixin, FrozenStagesMixin, VisionTransformer):
    """STViT-DeiT: a DeiT whose later layers run on a few semantic tokens.

    ``X`` the ``H x W`` patch tokens, ``l = stgm_layers[0]``, ``N_s = s * s``;
    every layer pre-norm, as upstream:

    1. layers ``< l``: upstream on ``[cls; X]`` ``(B, 1 + HW, C)``;
    2. class token dropped; ``P = pool(X)`` ``(B, N_s, C)``;
    3. STGM-1 (layer ``l``): ``S1 = MHA(P, X, X) + P``, then FFN;
    4. STGM-2 (layer ``l + 1``): ``S2 = MHA(S1 + G, [S1; X], [S1; X]) + S1``,
       then FFN; ``G`` ``(1, N_s, C)``;
    5. layers ``> l + 1``: upstream on ``(B, N_s, C)``.

    Args:
        arch (str | dict): ``'deit-tiny'``/``'deit-small'``/``'deit-base'``,
            another ``VisionTransformer`` arch, or a dict.
        stgm_layers (tuple[int, int]): 0-based STGM-1 and STGM-2, consecutive.
        semantic_tokens (int): ``N_s``, a perfect square (16 in the paper).
        pooling (str): ``'intra_inter'`` (only at ``img_size``), ``'max'`` or
            ``'avg'``.
        global_centres (bool): learnable ``G`` on the STGM-2 queries.
        out_type (str): ``'avg_featmap'`` ``(B, C)``, ``'featmap'``
            ``(B, C, s, s)`` or ``'raw'`` ``(B, N_s, C)``.
        out_indices (Sequence[int] | int): layers after STGM-2.
        **kwargs: the other arguments of mmpretrain's ``VisionTransformer``.
    """

    OUT_TYPES = {'raw', 'featmap', 'avg_featmap'}

    def __init__(self,
                 arch='deit-small',
                 stgm_layers=(4, 5),
                 semantic_tokens=16,
                 pooling='intra_inter',
                 global_centres=True,
                 out_type='avg_featmap',
                 out_indices=-1,
                 **kwargs):
        if isinstance(arch, str):
            arch = DEIT_ARCHS.get(arch.lower(), arch.lower())
            if arch not in self.arch_zoo:
                raise ValueError(
                    f'unknown arch {arch!r}; choose from '
                    f'{sorted(set(DEIT_ARCHS) | set(self.arch_zoo))} or '
                    f'give a dict')
        elif not isinstance(arch, dict) or not {
                'embed_dims', 'num_layers', 'num_heads',
                'feedforward_channels'
        } <= set(arch):
            raise ValueError('a custom arch is a dict with embed_dims, '
                             'num_layers, num_heads and feedforward_channels, '
                             f'got {arch!r}')
        if out_type == 'cls_token':
            raise ValueError(
                "STViT-DeiT drops the class token before the STGM, so "
                "out_type='cls_token' is impossible; use 'avg_featmap' (the "
                "paper's global average pooling), 'featmap' or 'raw'")
        if out_type not in self.OUT_TYPES:
            raise ValueError(f'unknown out_type {out_type!r}; choose from '
                             f'{sorted(self.OUT_TYPES)}')
        check_pooling(pooling)
        side = math.isqrt(semantic_tokens) if isinstance(
            semantic_tokens, int) and semantic_tokens > 0 else 0
        if side == 0 or side * side != semantic_tokens:
            raise ValueError(f'semantic_tokens must be a perfect square '
                             f'(16 = 4x4, 25, 36, 49), got {semantic_tokens}')
        num_layers = (arch if isinstance(arch, dict) else
                      self.arch_zoo[arch])['num_layers']
        stgm_layers = tuple(stgm_layers)
        if len(stgm_layers) != 2 or \
                stgm_layers[1] != stgm_layers[0] + 1 or \
                not 0 <= stgm_layers[0] < num_layers - 1:
            raise ValueError(
                f'stgm_layers must be two consecutive layer indices in '
                f'0..{num_layers - 1} (STGM-1, STGM-2), got {stgm_layers}')
        super().__init__(
            arch=arch, out_type=out_type, out_indices=out_indices, **kwargs)
        grid = tuple(self.patch_resolution)
        if side > min(grid):
            raise ValueError(
                f'{semantic_tokens} semantic tokens ({side}x{side}) do not '
                f'fit the {grid[0]}x{grid[1]} patch grid of img_size '
                f'{self.img_size}; at most {min(grid) ** 2}')
        for index in self.out_indices:
            if not stgm_layers[1] <= index < self.num_layers:
                raise ValueError(
                    f'out_indices must be layers after STGM-2 (from '
                    f'{stgm_layers[1]} to {self.num_layers - 1}): earlier '
                    f'layers have no semantic tokens; got {index}')
        self.stgm_layers = stgm_layers
        self.semantic_side = side
        self.pooling = pooling

        layer_cfgs = vit_layer_cfgs(self, dict(kwargs, arch=arch))
        for i in stgm_layers:
            self.layers[i] = CrossAttentionViTLayer(**layer_cfgs[i])

        self.pooler = IntraInterPooling(self.embed_dims, grid,
                                        (side, side)) \
            if pooling == 'intra_inter' else None
        self.global_centres = nn.Parameter(
            torch.zeros(1, semantic_tokens, self.embed_dims)) \
            if global_centres else None
        self.refreeze()  # upstream froze the layers before they changed

    #: reads a DeiT/ViT checkpoint in any supported layout
    host_state_dict = staticmethod(deit_state_dict)

    @property
    def new_parameter_prefixes(self):
        """Parameters STViT adds to DeiT (``ln2`` with ``'avg_featmap'``)."""
        prefixes = ('pooler.', 'global_centres')
        if self.out_type == 'avg_featmap':
            prefixes += ('ln2.', )
        return prefixes

    def adapt_host_state_dict(self, state_dict):
        """Resize the position embedding; refuse a pooler of another grid.

        Args:
            state_dict (dict): DeiT weights in mmpretrain's names.

        Returns:
            tuple[dict, tuple, None]: see
            :meth:`PretrainedMixin.adapt_host_state_dict`.

        Raises:
            ValueError: ``pooler.*`` of another shape.
        """
        self._prepare_pos_embed(state_dict, prefix='')
        if self.pooler is not None:
            for name, param in self.pooler.named_parameters(
                    prefix='pooler'):
                got = state_dict.get(name)
                if got is not None and got.shape != param.shape:
                    raise ValueError(
                        f'{name} is {tuple(got.shape)} in the checkpoint and '
                        f'{tuple(param.shape)} here: pooling=\'intra_inter\' '
                        'is sized for the patch grid of the img_size it was '
                        'trained at; build the model at that img_size, or '
                        'load the host (DeiT) checkpoint and train the '
                        'pooler at this size')
        return state_dict, (), None

    def init_new_parameters(self, fresh=None):
        """Init pooling (as average pooling) and ``G`` (trunc normal .02).

        Args:
            fresh: unused.
        """
        if self.pooler is not None:
            self.pooler.reset_parameters()
        if self.global_centres is not None:
            trunc_normal_(self.global_centres, std=.02)

    def initial_centres(self, patches, hw_shape):
        """Initial cluster centres ``P``.

        Args:
            patches (Tensor): ``(B, H * W, C)`` patch tokens, raster order.
            hw_shape (tuple[int, int]): ``(H, W)``.

        Returns:
            Tensor: ``(B, N_s, C)``, raster order on the ``s x s`` grid.
        """
        out = (self.semantic_side, self.semantic_side)
        if self.pooler is None:
            return pool_centres(patches, tuple(hw_shape), out,
                                self.pooling)[0]
        if tuple(hw_shape) != self.pooler.window:
            raise ValueError(
                f"pooling='intra_inter' is built for the "
                f'{self.pooler.window[0]}x{self.pooler.window[1]} patch '
                f'grid of img_size {self.img_size}, got a '
                f'{hw_shape[0]}x{hw_shape[1]} grid; set img_size to the '
                f"input size or use pooling='max'/'avg'")
        return self.pooler(patches)[0]

    def forward(self, x):
        """Patch embedding, DeiT layers, STGM, semantic layers.

        Args:
            x (Tensor): images ``(B, 3, H_img, W_img)``.

        Returns:
            tuple[Tensor]: per ``out_indices``: ``(B, C)``, ``(B, C, s, s)`` or
            ``(B, N_s, C)``.
        """
        x, patch_resolution = embed_tokens(self, x)
        first, second = self.stgm_layers
        patches = None

        def step(i, layer, x):
            nonlocal patches
            if i == first:  # STGM-1: S1 = MHA(P, X, X) + P, FFN
                patches = x[:, self.num_extra_tokens:]  # drop the class token
                centres = self.initial_centres(patches, patch_resolution)
                return layer(centres, layer.key_values(patches))
            if i == second:
                # STGM-2: S2 = MHA(S1 + G, [S1; X], [S1; X]) + S1, FFN
                kv = layer.key_values(torch.cat((x, patches), dim=1))
                query = x if self.global_centres is None else \
                    x + self.global_centres
                return layer(query, kv, shortcut=x)
            return layer(x)

        grid = (self.semantic_side, self.semantic_side)
        return run_layers(self, x, grid, step=step)[0]

    def _format_output(self, x, hw):
        """Semantic tokens ``(B, N_s, C)`` -> the ``out_type`` output."""
        if self.out_type == 'raw':
            return x
        if self.out_type == 'featmap':
            return x.reshape(x.shape[0], *hw, -1).permute(0, 3, 1, 2)
        return self.ln2(x.mean(dim=1))  # avg_featmap
