"""hMHSA + cFFN on Swin (mmpretrain ``SwinTransformer``)."""
from mmpretrain.models.backbones import SwinTransformer
from mmpretrain.models.utils import ShiftWindowMSA

from mmvitaccel.ops import check_hmhsa_form
from mmvitaccel.registry import MODELS
from mmvitaccel.models.hvit.cffn import compact_ffn
from mmvitaccel.models.hvit.hmhsa_attention import (HallucinatedWindowMSA,
                                                    resolve_hmhsa_stages)
from mmvitaccel.models.utils import check_in_channels, swin_state_dict
from mmvitaccel.models.hvit.hvit_base import HViTHostMixin, resolve_layers


class SmallMapShiftWindowMSA(ShiftWindowMSA):
    """mmpretrain's ``ShiftWindowMSA`` that pads maps smaller than a window
    (as ``pad_small_map=True``) instead of refusing them.

    Args:
        *args: the arguments of ``ShiftWindowMSA``.
        **kwargs: the arguments of ``ShiftWindowMSA``.
    """

    def forward(self, query, hw_shape):
        """Args:
            query (Tensor): ``(B, H * W, C)``.
            hw_shape (tuple[int, int]): ``(H, W)``, any size.

        Returns:
            Tensor: ``(B, H * W, C)``.
        """
        if self.pad_small_map or min(hw_shape) >= self.window_size:
            return super().forward(query, hw_shape)
        self.pad_small_map = True  # upstream's padding, for this map only
        try:
            return super().forward(query, hw_shape)
        finally:
            self.pad_small_map = False


def small_map_shift_window_msa(old):
    """A :class:`SmallMapShiftWindowMSA` with ``old``'s settings, modules."""
    new = SmallMapShiftWindowMSA(
        embed_dims=old.w_msa.embed_dims,
        num_heads=old.w_msa.num_heads,
        window_size=old.window_size,
        shift_size=old.shift_size,
        pad_small_map=old.pad_small_map)
    new.w_msa, new.drop = old.w_msa, old.drop
    return new


@MODELS.register_module()
class HViTSwinTransformer(HViTHostMixin, SwinTransformer):
    """Swin with hMHSA window attention and cFFN.

    hMHSA (:class:`~mmvitaccel.models.HallucinatedWindowMSA`) runs IHH on
    each ``w x w`` window; cFFN factors ``ffn.layers.1``. Swin-T/S heads
    ``[3, 6, 12, 24]``: ``hmhsa=True`` is stages 1-3 (0-based); Swin-B takes
    all four. Maps smaller than a window are padded, not refused.

    Args:
        arch (str | dict): mmpretrain Swin arch (``'tiny'`` ...).
        hmhsa (bool | Sequence[int]): hMHSA stages (even heads only).
        cffn (bool | Sequence[int]): cFFN in all stages, none, or these.
        cffn_ratio (float): Compact ratio ``t``.
        cffn_branches (int): ``r`` branches while training.
        deploy (bool): Build cFFN folded.
        ihh_kernel (int): IHH filter side.
        hmhsa_form (str): ``'explicit'``, ``'fused'``, ``'stacked'`` or
            ``'auto'`` (``docs/hmhsa_cffn_design.md#forms``).
        **kwargs: Other ``SwinTransformer`` arguments.
    """

    def __init__(self,
                 arch='tiny',
                 hmhsa=True,
                 cffn=True,
                 cffn_ratio=0.5,
                 cffn_branches=2,
                 deploy=False,
                 ihh_kernel=3,
                 hmhsa_form='auto',
                 **kwargs):
        super().__init__(arch=arch, **kwargs)
        self.deploy = deploy
        check_hmhsa_form(hmhsa_form)
        self.hmhsa_stages = resolve_hmhsa_stages(hmhsa, self.num_heads)
        self.cffn_stages = resolve_layers(cffn, len(self.stages), 'cffn')
        for i, stage in enumerate(self.stages):
            for block in stage.blocks:
                block.attn = small_map_shift_window_msa(block.attn)
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
                        kernel_size=ihh_kernel,
                        hmhsa_form=hmhsa_form)
                if i in self.cffn_stages:
                    compact_ffn(block.ffn, cffn_ratio, cffn_branches, deploy)
        # frozen stages are applied by upstream's train()

    def forward(self, x):
        """Upstream's forward, refusing inputs of other channel counts.

        Args:
            x (Tensor): images ``(B, 3, H, W)``, any size.

        Returns:
            tuple[Tensor]: ``(B, C_i, H_i, W_i)`` maps of ``out_indices``.
        """
        check_in_channels(x, self.patch_embed.projection.in_channels, 4)
        return super().forward(x)

    #: reads official / mmdet / mmpretrain Swin checkpoints
    read_host_checkpoint = staticmethod(swin_state_dict)

    def _prepare_host_state_dict(self, state_dict):
        """Resize the position tables as upstream's load hooks do."""
        self._prepare_relative_position_bias_table(state_dict, '')
        if self.use_abs_pos_embed:
            self._prepare_abs_pos_embed(state_dict, '')
