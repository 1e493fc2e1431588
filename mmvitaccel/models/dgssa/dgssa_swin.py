"""DGSSA-Swin: static window attention in ``P`` Swin blocks from block 1.

Paper: *Accelerating Vision Transformers Based on Heterogeneous Attention
Patterns* (no public code; reconstruction in
``docs/dgssa_glad_design.md#dgssa``). Swin already has a token pyramid, so
only DGSSA is applied: ``P`` blocks (6/12/12 for Swin-T/S/B, counted over
all stages in order), starting at block 1 as the paper leaves the 0th layer
dynamic, replace
``softmax(Q K^T / sqrt(d_h) + B + mask)`` by ``softmax(S + mask)``, one
static ``w^2 x w^2`` logit matrix ``S`` per head and block, shared by all
windows and images. The relative position bias ``B`` is folded into ``S``
(the ``'dg'`` init averages attention that already contains it; the other
inits add the checkpoint's bias). Shifted blocks keep Swin's shift mask,
and padding is masked (a valid token never attends to padding).

The backbone is mmdet's ``SwinTransformer`` otherwise (through
:class:`~mmvitaccel.models.utils.SwinBase`), and returns its 4-level NCHW
pyramid, so it drops into Cascade Mask R-CNN, UperNet and the
mmpretrain classifier (with the upstream GAP neck).
"""

import torch

from mmvitaccel.ops import check_init_mode, init_static_logits
from mmvitaccel.registry import MODELS
from mmvitaccel.models.dgssa.static_attention import (StaticShiftWindowMSA,
                                                      static_blocks_for)
from mmvitaccel.models.dgssa.static_checkpoint import (fresh_static_init,
                                                       static_attention_state_dict)
from mmvitaccel.models.utils import (PretrainedMixin, SwinBase, swin_config,
                                     swin_state_dict)

#: the paper's first static block: the 0th stays dynamic
STATIC_START = 1


@MODELS.register_module()
class DGSSASwinTransformer(PretrainedMixin, SwinBase):
    """Swin with DGSSA (static window attention) in ``P`` early blocks.

    The static blocks are ``static_start, ..., static_start + P - 1``,
    counted over all stages in order. The paper: "DGSSA is consecutively
    applied in the early layers (except the 0-th layer)", with the
    constraint ``sum_{l=1}^{P} gamma_l = P`` (``gamma_l = 1``: layer ``l``
    is static), so block 0 stays dynamic and blocks ``1..P`` are static
    (``static_start=1``, the default). The same paper also says "the first
    ``P`` layers use the SSA"; ``static_start=0`` is that reading (blocks
    ``0..P-1``, this backbone's placement before it followed the
    constraint). DGSSA-ViT follows the constraint too (its
    ``static_layers=(1, 2)`` for ``P = 2``).

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
            (over all stages) with DGSSA; None: half of them, the paper's
            6/12/12 on Swin-T/S/B, as the switch places it
            (:func:`~.static_attention.static_blocks_for`).
        static_start (int): the first static block (0-based, over all
            stages): 1 (the paper's constraint, block 0 dynamic) or 0 (the
            "first ``P`` layers" reading); in ``0..total - P``.
        static_init (str): ``'dg'`` (logits from ``tools/dgssa_init.py``'s
            checkpoint; uniform from scratch), ``'random'``, ``'uniform'``
            or ``'local'`` (each plus the checkpoint's relative position
            bias when loading one).
        **kwargs: the arguments of mmdet's ``SwinTransformer``.
    """

    def __init__(self, arch=None, static_blocks=None, static_init='dg',
                 static_start=STATIC_START, **kwargs):
        _, cfg = swin_config(arch, kwargs)
        if static_blocks is None:
            static_blocks = static_blocks_for(cfg['depths'])
        check_init_mode(static_init)
        total = sum(cfg['depths'])
        if not 0 <= static_blocks <= total:
            raise ValueError(f'static_blocks must be in 0..{total} (the '
                             f'blocks of depths {tuple(cfg["depths"])}), got '
                             f'{static_blocks}')
        if (isinstance(static_start, bool) or not isinstance(static_start, int)
                or not 0 <= static_start <= total - static_blocks):
            raise ValueError(
                f'static_start must be an int in 0..{total - static_blocks} '
                f'(static_blocks={static_blocks} of {total} blocks; the '
                f'paper: 1), got {static_start!r}')
        super().__init__(arch, **kwargs)
        self.static_blocks = static_blocks
        self.static_start = static_start
        self.static_init = static_init
        self.window_size = cfg['window_size']
        for _, block in self.static_block_items():
            block.attn = StaticShiftWindowMSA.from_dynamic(block.attn)
        self.reset_static_logits('uniform' if static_init == 'dg' else None)

    def static_block_items(self):
        """``(name, block)`` of the static blocks, in order; ``name`` is
        ``stages.{i}.blocks.{j}``: the blocks ``static_start, ...,
        static_start + static_blocks - 1`` counted over all stages."""
        blocks = [(f'stages.{i}.blocks.{j}', block)
                  for i, stage in enumerate(self.stages)
                  for j, block in enumerate(stage.blocks)]
        return blocks[self.static_start:self.static_start +
                      self.static_blocks]

    def reset_static_logits(self, mode=None, biases=None):
        """Static logits by ``mode`` (``static_init`` by default; ``'dg'``
        without data falls back to uniform with a warning), plus the
        relative position bias of each block in ``biases`` (by name)."""
        mode = fresh_static_init(mode or self.static_init)
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

    #: mmdet's Swin reads any ``init_cfg`` as a checkpoint
    host_init_ignores_init_cfg = True

    def convert_host_state_dict(self, state_dict):
        """Swin state dict -> this model's names. For each static block:
        ``qkv`` -> ``v`` (V rows; Q, K dropped); the relative position
        table is turned into the block's bias ``(h, w^2, w^2)`` and dropped
        (with its index). Static logits already in the checkpoint are kept
        (:func:`~mmvitaccel.models.utils.static_attention_state_dict`).

        Args:
            state_dict (dict): Swin weights in mmdet's names.

        Returns:
            tuple[dict, list[str], OrderedDict]: the state dict, notes of
            what was dropped or folded, and ``{static logits name: bias}``
            of the blocks whose logits must be initialised here.
        """
        return static_attention_state_dict(
            state_dict,
            {f'{name}.attn.w_msa.': block.attn.w_msa
             for name, block in self.static_block_items()},
            self.static_init, window=self.window_size)

    def adapt_host_state_dict(self, state_dict):
        """Split the static blocks' ``qkv`` and fold their relative
        position bias (:meth:`convert_host_state_dict`).

        Args:
            state_dict (dict): Swin weights in mmdet's names.

        Returns:
            tuple[dict, OrderedDict, list[str]]: see
            :meth:`PretrainedMixin.adapt_host_state_dict`.
        """
        state_dict, notes, fresh = self.convert_host_state_dict(state_dict)
        return state_dict, fresh, notes

    def init_new_parameters(self, fresh=None):
        """Static logits by ``static_init`` from scratch; when loading, the
        ones the checkpoint lacks, each plus its folded bias.

        Args:
            fresh (dict[str, Tensor] | None): ``{static logits name:
                bias}`` from :meth:`convert_host_state_dict`, or None.
        """
        if fresh is None:
            self.reset_static_logits()
        elif fresh:
            self.reset_static_logits(biases={
                name: fresh[f'{name}.attn.w_msa.static_logits']
                for name, _ in self.static_block_items()
                if f'{name}.attn.w_msa.static_logits' in fresh
            })
