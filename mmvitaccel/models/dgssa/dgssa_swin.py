"""DGSSA-Swin: static window attention ``softmax(S + mask)`` in ``P`` blocks
of mmdet's Swin (``docs/dgssa_glad_design.md#dgssa``)."""

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

    Blocks ``static_start .. static_start + P - 1``, over all stages, are
    static. The paper: "DGSSA is consecutively applied in the early layers
    (except the 0-th layer)", ``sum_{l=1}^{P} gamma_l = P``; it also says
    "the first ``P`` layers use the SSA" (``static_start=0``).

    Args:
        arch (str | None): ``'tiny'``, ``'small'``, ``'base'``; None keeps
            the explicit sizes.
        static_blocks (int | None): ``P``; None: half the blocks
            (:func:`~.static_attention.static_blocks_for`).
        static_start (int): the first static block, 1 (paper) or 0.
        static_init (str): ``'dg'``, ``'random'``, ``'uniform'`` or
            ``'local'`` (plus the checkpoint's relative position bias).
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
        """``(name, block)`` of the static blocks, in order."""
        blocks = [(f'stages.{i}.blocks.{j}', block)
                  for i, stage in enumerate(self.stages)
                  for j, block in enumerate(stage.blocks)]
        return blocks[self.static_start:self.static_start +
                      self.static_blocks]

    def reset_static_logits(self, mode=None, biases=None):
        """Static logits by ``mode`` (default ``static_init``) + ``biases``."""
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
        """Swin state dict -> this model's names
        (:func:`~mmvitaccel.models.dgssa.static_attention_state_dict`).

        Args:
            state_dict (dict): Swin weights in mmdet's names.

        Returns:
            tuple[dict, list[str], OrderedDict]: the state dict, notes, and
            ``{static logits name: bias}`` to initialise here.
        """
        return static_attention_state_dict(
            state_dict,
            {f'{name}.attn.w_msa.': block.attn.w_msa
             for name, block in self.static_block_items()},
            self.static_init, window=self.window_size)

    def adapt_host_state_dict(self, state_dict):
        """Split ``qkv``, fold the bias (:meth:`convert_host_state_dict`).

        Args:
            state_dict (dict): Swin weights in mmdet's names.

        Returns:
            tuple[dict, OrderedDict, list[str]]: see
            :meth:`PretrainedMixin.adapt_host_state_dict`.
        """
        state_dict, notes, fresh = self.convert_host_state_dict(state_dict)
        return state_dict, fresh, notes

    def init_new_parameters(self, fresh=None):
        """Static logits by ``static_init``, plus the folded bias if loading.

        Args:
            fresh (dict[str, Tensor] | None): ``{name: bias}``, or None.
        """
        if fresh is None:
            self.reset_static_logits()
        elif fresh:
            self.reset_static_logits(biases={
                name: fresh[f'{name}.attn.w_msa.static_logits']
                for name, _ in self.static_block_items()
                if f'{name}.attn.w_msa.static_logits' in fresh
            })
