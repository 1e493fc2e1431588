"""STViT on DeiT: semantic tokens replace the image tokens mid-network.

Paper: Chang et al., *Making Vision Transformers Efficient from A Token
Sparsification View* (CVPR 2023). The authors never released their DeiT
code; the layout is the paper's, reconstructed in ``docs/stvit_design.md``
(section 7): STGM at layers 5-6 of 12, 16 (4x4) semantic tokens, learnable
global centres added to the STGM-2 queries, global average pooling head.
"""
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

    With ``X`` the ``H x W`` patch tokens, ``l = stgm_layers[0]`` and
    ``N_s = semantic_tokens = s * s``:

    1. layers ``0 .. l-1`` are upstream ViT layers on ``[cls; X]``
       ``(B, 1 + HW, C)``, the pretrained DeiT unchanged;
    2. the class token is dropped; initial centres
       ``P = pool(X)`` ``(B, N_s, C)``: adaptive max/avg pooling of the
       ``H x W`` grid to ``s x s``, or the learnable intra/inter pooling;
    3. STGM-1 (layer ``l``, a :class:`CrossAttentionViTLayer`):
       ``S1' = MHA(q=P, k=X, v=X) + P``, ``S1 = FFN(S1') + S1'``; the keys
       are all patch tokens (a global receptive field);
    4. STGM-2 (layer ``l + 1``):
       ``S2' = MHA(q=S1 + G, k=[S1; X], v=[S1; X]) + S1``,
       ``S2 = FFN(S2') + S2'``, with ``G`` ``(1, N_s, C)`` learnable global
       centres added to the queries only;
    5. layers ``l+2 ..`` are upstream ViT self-attention layers on the
       semantic tokens ``(B, N_s, C)``; then the final norm (``ln1``).

    Norms are omitted in the equations: every layer is pre-norm
    (``ln1``/``ln2``), as upstream. All parameter names are
    ``VisionTransformer``'s, so an mmpretrain or official DeiT checkpoint
    initialises everything but ``G``, the learnable pooling and (with
    ``out_type='avg_featmap'``) the norm after pooling, ``ln2``.

    Args:
        arch (str | dict): ``'deit-tiny'``, ``'deit-small'``,
            ``'deit-base'`` (or ``'tiny'``/``'small'``/``'base'``, read as
            DeiT), any other arch name of ``VisionTransformer``, or a dict
            with ``embed_dims``, ``num_layers``, ``num_heads`` and
            ``feedforward_channels``.
        stgm_layers (tuple[int, int]): 0-based indices of STGM-1 and STGM-2,
            two consecutive layers; ``(4, 5)`` is the paper's layers 5-6 of
            12.
        semantic_tokens (int): ``N_s``, a perfect square ``s * s`` with
            ``s`` at most the smaller side of the patch grid at
            ``img_size``; 16 in the paper (25, 36, 49 also reported).
        pooling (str): initial centres: ``'intra_inter'`` (the paper's
            learnable pooling, built for the patch grid at ``img_size``;
            other input sizes raise an error), ``'max'`` or ``'avg'``
            (adaptive pooling, any input size).
        global_centres (bool): learnable global centres ``G`` added to the
            STGM-2 queries; the author says they matter on DeiT.
        out_type (str): ``'avg_featmap'``: ``ln2`` of the mean of the
            semantic tokens ``(B, C)``, as upstream's average pooling;
            ``'featmap'``: the semantic grid ``(B, C, s, s)``; ``'raw'``:
            the semantic tokens ``(B, N_s, C)``. There is no class token at
            the end, so ``'cls_token'`` is refused.
        out_indices (Sequence[int] | int): layers whose output is returned;
            each must come after STGM-2 (the outputs are semantic tokens).
        **kwargs: the other arguments of mmpretrain's
            ``VisionTransformer`` (``img_size``, ``patch_size``,
            ``drop_path_rate``, ``with_cls_token``, ``final_norm``,
            ``layer_cfgs``, ``init_cfg``, ...).
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

    #: reads a host (DeiT/ViT) checkpoint in any supported layout
    host_state_dict = staticmethod(deit_state_dict)

    @property
    def new_parameter_prefixes(self):
        """Names of the parameters STViT adds to DeiT (and ``ln2``, the norm
        after average pooling, which a class-token DeiT does not have)."""
        prefixes = ('pooler.', 'global_centres')
        if self.out_type == 'avg_featmap':
            prefixes += ('ln2.', )
        return prefixes

    def adapt_host_state_dict(self, state_dict):
        """Resize a position embedding of another grid as upstream does.
        A learnable pooler of another grid is refused: its inter-window
        projection has one output per token of a pooling bin, so it holds
        only at the ``img_size`` it was trained at.

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
        """Initialise what STViT adds to DeiT: the learnable pooling starts
        as average pooling, the global centres ``G`` are Gaussian (trunc
        normal, std .02).

        Args:
            fresh: unused (everything STViT adds is new to a checkpoint).
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
            Tensor: ``(B, N_s, C)``, raster order over the ``s x s`` grid.
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
            x (Tensor): images ``(B, 3, H_img, W_img)``; any size with
                ``'max'``/``'avg'`` pooling, ``img_size`` with
                ``'intra_inter'``.

        Returns:
            tuple[Tensor]: one output per ``out_indices``, by ``out_type``:
            ``(B, C)``, ``(B, C, s, s)`` or ``(B, N_s, C)``.
        """
        x, patch_resolution = embed_tokens(self, x)
        first, second = self.stgm_layers
        patches = None

        def step(i, layer, x):
            nonlocal patches
            if i == first:  # STGM-1: S1 = MHA(q=P, k=X, v=X) + P, then FFN
                patches = x[:, self.num_extra_tokens:]  # drop the class token
                centres = self.initial_centres(patches, patch_resolution)
                return layer(centres, layer.key_values(patches))
            if i == second:
                # STGM-2: S2 = MHA(q=S1 + G, k=[S1; X], v=[S1; X]) + S1, FFN
                kv = layer.key_values(torch.cat((x, patches), dim=1))
                query = x if self.global_centres is None else \
                    x + self.global_centres
                return layer(query, kv, shortcut=x)
            return layer(x)

        # outputs come after STGM-2 (checked at build): semantic tokens
        grid = (self.semantic_side, self.semantic_side)
        return run_layers(self, x, grid, step=step)[0]

    def _format_output(self, x, hw):
        """Semantic tokens ``(B, N_s, C)`` -> the ``out_type`` output."""
        if self.out_type == 'raw':
            return x
        if self.out_type == 'featmap':
            return x.reshape(x.shape[0], *hw, -1).permute(0, 3, 1, 2)
        return self.ln2(x.mean(dim=1))  # avg_featmap
