"""hMHSA + cFFN on Swin (mmpretrain ``SwinTransformer``)."""
from mmpretrain.models.backbones import SwinTransformer

from ...registry import MODELS
from ..layers import (HallucinatedWindowMSA, compact_ffn,
                      resolve_hmhsa_stages)
from ..utils import swin_state_dict
from .hvit_base import HViTHostMixin, resolve_layers


@MODELS.register_module()
class HViTSwinTransformer(HViTHostMixin, SwinTransformer):
    """Swin with hMHSA window attention and cFFN.

    hMHSA (:class:`~mmvitaccel.models.layers.HallucinatedWindowMSA`) works
    inside each ``w x w`` window: ``h / 2`` real maps, IHH on the ``w x w``
    key grid (zero padded at the window border), CHH, then the relative
    position bias (upstream's ``h``-column table) and the shift mask on all
    ``h`` maps, softmax, full ``V``. cFFN factors ``ffn.layers.1``.

    Swin-T/S heads are ``[3, 6, 12, 24]``: stage 1 cannot halve its 3
    heads, so ``hmhsa=True`` means stages 2-4 (0-based 1-3) and a list
    naming stage 0 is refused; Swin-B ``[4, 8, 16, 32]`` takes all four.

    Args:
        arch (str | dict): mmpretrain Swin arch (``'tiny'`` ...).
        hmhsa (bool | Sequence[int]): hMHSA stages (see above).
        cffn (bool | Sequence[int]): cFFN in all stages, none, or these.
        cffn_ratio (float): Compact ratio ``t`` (NOTES.md: 0.5).
        cffn_branches (int): ``r`` (NOTES.md: 2).
        deploy (bool): Build cFFN folded.
        ihh_kernel (int): IHH filter side.
        **kwargs: Other ``SwinTransformer`` arguments. ``init_cfg=dict(
            type='Pretrained', checkpoint=...)`` reads official, mmdet or
            mmpretrain Swin weights (relative position tables resized to
            this window).
    """

    def __init__(self,
                 arch='tiny',
                 hmhsa=True,
                 cffn=True,
                 cffn_ratio=0.5,
                 cffn_branches=2,
                 deploy=False,
                 ihh_kernel=3,
                 **kwargs):
        super().__init__(arch=arch, **kwargs)
        self.deploy = deploy
        self.hmhsa_stages = resolve_hmhsa_stages(hmhsa, self.num_heads)
        self.cffn_stages = resolve_layers(cffn, len(self.stages), 'cffn')
        for i, stage in enumerate(self.stages):
            for block in stage.blocks:
                if i in self.hmhsa_stages:
                    old = block.attn.w_msa
                    block.attn.w_msa = HallucinatedWindowMSA(
                        embed_dims=old.embed_dims,
                        window_size=old.window_size,
                        num_heads=old.num_heads,
                        qkv_bias=old.qkv.bias is not None,
                        qk_scale=old.scale,
                        attn_drop=old.attn_drop.p,
                        proj_drop=old.proj_drop.p,
                        kernel_size=ihh_kernel)
                if i in self.cffn_stages:
                    compact_ffn(block.ffn, cffn_ratio, cffn_branches, deploy)
        # frozen stages are applied by upstream's train()

    #: reads official / mmdet / mmpretrain Swin checkpoints
    read_host_checkpoint = staticmethod(swin_state_dict)

    def _prepare_host_state_dict(self, state_dict):
        """Resize relative position tables (and an absolute position
        embedding) to this model, as upstream's load hooks do."""
        self._prepare_relative_position_bias_table(state_dict, '')
        if self.use_abs_pos_embed:
            self._prepare_abs_pos_embed(state_dict, '')
