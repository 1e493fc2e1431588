"""DGSSA-Swin: static window attention in the first ``P`` Swin blocks.

Paper: *Accelerating Vision Transformers Based on Heterogeneous Attention
Patterns* (no public code; reconstruction in ``NOTES.md``). Swin already
has a token pyramid, so only DGSSA is applied: the first ``P`` blocks
(6/12/12 for Swin-T/S/B, counted over all stages in order) replace
``softmax(Q K^T / sqrt(d_h) + B + mask)`` by ``softmax(S + mask)``, one
static ``w^2 x w^2`` logit matrix ``S`` per head and block, shared by all
windows and images. The relative position bias ``B`` is folded into ``S``
(the ``'dg'`` init averages attention that already contains it; the other
inits add the checkpoint's bias). Shifted blocks keep Swin's shift mask,
and padding is masked (a valid token never attends to padding).

The backbone is mmdet's ``SwinTransformer`` otherwise, and returns its
4-level NCHW pyramid, so it drops into Cascade Mask R-CNN, UperNet and the
mmpretrain classifier (with the upstream GAP neck).
"""
import inspect
import warnings

import torch
from mmdet.models.backbones.swin import SwinTransformer, WindowMSA
from mmengine.logging import MMLogger

from ...ops import check_init_mode, init_static_logits
from ...registry import MODELS
from ..layers import StaticShiftWindowMSA
from ..utils import check_in_channels, load_with_report, swin_state_dict
from .stvit_swin import SWIN_ARCHS

#: the paper's P (static blocks) per Swin size
STATIC_BLOCKS = {'tiny': 6, 'small': 12, 'base': 12}


def relative_position_index(window):
    """mmdet ``WindowMSA``'s relative position index ``(w^2, w^2)``."""
    coords = WindowMSA.double_step_seq(2 * window - 1, window, 1, window)
    return (coords + coords.T).flip(1).contiguous()


@MODELS.register_module()
class DGSSASwinTransformer(SwinTransformer):
    """Swin with DGSSA (static window attention) in its first ``P`` blocks.

    Parameter names stay mmdet's (which mmpretrain's Swin shares): a static
    block's ``attn.w_msa.qkv`` becomes ``attn.w_msa.v`` (its V rows), its
    relative position table and index go (folded into
    ``attn.w_msa.static_logits``). Official, mmdet/mmseg and mmpretrain
    Swin checkpoints load, with a report of the dropped Q/K and the folded
    bias.

    Args:
        arch (str | None): ``'tiny'``, ``'small'``, ``'base'`` set
            ``embed_dims``/``depths``/``num_heads``; None keeps the explicit
            ones.
        static_blocks (int | None): ``P``, the number of leading blocks
            (over all stages) with DGSSA; None: the paper's 6/12/12.
        static_init (str): ``'dg'`` (logits from ``tools/dgssa_init.py``'s
            checkpoint; uniform from scratch), ``'random'``, ``'uniform'``
            or ``'local'`` (each plus the checkpoint's relative position
            bias when loading one).
        **kwargs: the arguments of mmdet's ``SwinTransformer``.
    """

    def __init__(self, arch=None, static_blocks=None, static_init='dg',
                 **kwargs):
        if arch is not None:
            if arch not in SWIN_ARCHS:
                raise ValueError(f'unknown arch {arch!r}; choose from '
                                 f'{sorted(SWIN_ARCHS)}')
            kwargs.update(SWIN_ARCHS[arch])
        if static_blocks is None:
            if arch not in STATIC_BLOCKS:
                raise ValueError('static_blocks is needed with a custom arch')
            static_blocks = STATIC_BLOCKS[arch]
        check_init_mode(static_init)
        args = inspect.signature(SwinTransformer.__init__).bind(
            None, **kwargs)
        args.apply_defaults()
        total = sum(args.arguments['depths'])
        if not 0 <= static_blocks <= total:
            raise ValueError(f'static_blocks must be in 0..{total} (the '
                             f'blocks of depths '
                             f'{tuple(args.arguments["depths"])}), got '
                             f'{static_blocks}')
        super().__init__(**kwargs)
        self.static_blocks = static_blocks
        self.static_init = static_init
        self.window_size = args.arguments['window_size']
        for _, block in self.static_block_items():
            block.attn = StaticShiftWindowMSA.from_dynamic(block.attn)
        self.reset_static_logits('uniform' if static_init == 'dg' else None)

    def static_block_items(self):
        """``(name, block)`` of the static blocks, in order; ``name`` is
        ``stages.{i}.blocks.{j}``."""
        items = []
        for i, stage in enumerate(self.stages):
            for j, block in enumerate(stage.blocks):
                if len(items) < self.static_blocks:
                    items.append((f'stages.{i}.blocks.{j}', block))
        return items

    def reset_static_logits(self, mode=None, biases=None):
        """Static logits by ``mode`` (``static_init`` by default; ``'dg'``
        without data falls back to uniform with a warning), plus the
        relative position bias of each block in ``biases`` (by name)."""
        mode = mode or self.static_init
        if mode == 'dg':
            warnings.warn("static_init='dg' takes the static logits from a "
                          'checkpoint written by tools/dgssa_init.py; none '
                          'given, so they start uniform')
            mode = 'uniform'
        w = self.window_size
        for name, block in self.static_block_items():
            msa = block.attn.w_msa
            logits = init_static_logits(mode, msa.num_heads, w * w, (w, w))
            if biases is not None and name in biases:
                logits = logits + biases[name]
            with torch.no_grad():
                msa.static_logits.copy_(logits)

    #: reads a host (Swin) checkpoint in any supported layout
    host_state_dict = staticmethod(swin_state_dict)

    def convert_host_state_dict(self, state_dict):
        """Swin state dict -> this model's names. For each static block:
        ``qkv`` -> ``v`` (V rows; Q, K dropped); the relative position
        table is turned into the block's bias ``(h, w^2, w^2)`` and dropped
        (with its index). Static logits already in the checkpoint are kept.

        Returns:
            tuple[dict, list[str], dict]: the state dict, notes of what was
            dropped or folded, and ``{block name: bias}`` of the blocks
            whose logits must be initialised here.
        """
        state_dict = dict(state_dict)
        notes, biases = [], {}
        w = self.window_size
        index = relative_position_index(w).view(-1)
        own = {f'{name}.attn.w_msa.static_logits'
               for name, _ in self.static_block_items()}
        for key in [k for k in state_dict if k.endswith('.static_logits')]:
            if key not in own:  # tools/dgssa_init.py writes every block's
                del state_dict[key]
        for name, block in self.static_block_items():
            p = f'{name}.attn.w_msa.'
            C = block.attn.w_msa.embed_dims
            for kind in ('weight', 'bias'):
                qkv = state_dict.pop(p + f'qkv.{kind}', None)
                if qkv is not None:
                    state_dict[p + f'v.{kind}'] = qkv[2 * C:]
                    notes.append(f'{p}qkv.{kind}: Q and K dropped')
            table = state_dict.pop(p + 'relative_position_bias_table', None)
            state_dict.pop(p + 'relative_position_index', None)
            own = tuple(block.attn.w_msa.static_logits.shape)
            key = p + 'static_logits'
            if key in state_dict and tuple(state_dict[key].shape) == own:
                continue
            if self.static_init == 'dg':
                raise ValueError(
                    f"static_init='dg' needs {key} of shape {own} in the "
                    f'checkpoint: write it with tools/dgssa_init.py, or '
                    f'choose another static_init')
            state_dict.pop(key, None)
            bias = torch.zeros(own)
            if table is not None and table.shape[0] == (2 * w - 1)**2:
                bias = table[index].view(w * w, w * w, -1).permute(2, 0, 1)
                notes.append(f'{p}relative_position_bias_table: folded into '
                             f'the static logits')
            biases[name] = bias.float()
        return state_dict, notes, biases

    def init_weights(self):
        """From scratch as mmdet's Swin (static logits by ``static_init``),
        or from a Swin checkpoint in ``init_cfg=dict(type='Pretrained',
        checkpoint=...)`` (official, mmdet/mmseg or mmpretrain layout;
        optionally with static logits from ``tools/dgssa_init.py``), with a
        report in ``self.load_report`` (``dropped`` lists Q/K and folded
        biases)."""
        if self.init_cfg is not None and \
                self.init_cfg.get('type') == 'Pretrained':
            state_dict = self.host_state_dict(self.init_cfg['checkpoint'])
            state_dict, notes, biases = self.convert_host_state_dict(
                state_dict)
            if biases:
                self.reset_static_logits(biases=biases)
            fresh = tuple(f'{name}.attn.w_msa.static_logits'
                          for name in biases)
            self.load_report = load_with_report(self, state_dict, fresh)
            self.load_report['dropped'] = notes
            if notes:
                MMLogger.get_current_instance().warning(
                    f'DGSSA: {len(notes)} conversions: ' + '; '.join(notes))
        else:
            init_cfg, self.init_cfg = self.init_cfg, None
            super().init_weights()
            self.init_cfg = init_cfg
            self.reset_static_logits()

    def forward(self, x):
        """Args:
            x (Tensor): images ``(B, 3, H, W)``, any size.

        Returns:
            tuple[Tensor]: NCHW maps of ``out_indices`` (mmdet's Swin
            returns a list; a tuple also suits mmpretrain's necks).
        """
        check_in_channels(x, self.patch_embed.projection.in_channels, 4)
        return tuple(super().forward(x))
