"""hMHSA + cFFN on PVTv2 (mmdet ``PyramidVisionTransformerV2``)."""
from mmcv.cnn.bricks.drop import DropPath
from mmdet.models.backbones.pvt import PyramidVisionTransformerV2

from mmvitaccel.ops import check_hmhsa_form
from mmvitaccel.registry import MODELS
from mmvitaccel.models.hvit.cffn import compact_ffn
from mmvitaccel.models.hvit.hmhsa_attention import resolve_hmhsa_stages
from mmvitaccel.models.hvit.hmhsa_sra import HallucinatedSRA
from mmvitaccel.models.hvit.hvit_checkpoint import pvtv2_state_dict
from mmvitaccel.models.utils import check_in_channels
from mmvitaccel.models.hvit.hvit_base import HViTHostMixin, resolve_layers

#: PVTv2 sizes (whai362/PVT): per-stage widths are embed_dims * num_heads
PVTV2_ARCHS = {
    'b0': dict(embed_dims=32, num_layers=[2, 2, 2, 2]),
    'b1': dict(embed_dims=64, num_layers=[2, 2, 2, 2]),
    'b2': dict(embed_dims=64, num_layers=[3, 4, 6, 3]),
    'b3': dict(embed_dims=64, num_layers=[3, 4, 18, 3]),
    'b4': dict(embed_dims=64, num_layers=[3, 8, 27, 3]),
    'b5':
    dict(embed_dims=64, num_layers=[3, 6, 40, 3], mlp_ratios=[4, 4, 4, 4]),
}


@MODELS.register_module()
class HViTPyramidVisionTransformerV2(HViTHostMixin,
                                     PyramidVisionTransformerV2):
    """PVTv2 with hMHSA on its spatial-reduction attention and cFFN.

    hMHSA (:class:`~mmvitaccel.models.HallucinatedSRA`): IHH on the
    reduced key grid ``H / sr x W / sr``; cFFN factors MixFFN's ``fc2``
    (``ffn.layers.4``). Heads ``[1, 2, 5, 8]``: ``hmhsa=True`` is stages 1
    and 3 (0-based). Inputs below :meth:`min_input_size` are refused.

    Args:
        arch (str): ``'b0'`` .. ``'b5'``; explicit ``kwargs`` win.
        hmhsa (bool | Sequence[int]): hMHSA stages (even heads only).
        cffn (bool | Sequence[int]): cFFN in all stages, none, or these.
        cffn_ratio (float): Compact ratio ``t``.
        cffn_branches (int): ``r`` branches while training.
        deploy (bool): Build cFFN folded.
        ihh_kernel (int): IHH filter side.
        hmhsa_form (str): ``'explicit'``, ``'fused'``, ``'stacked'`` or
            ``'auto'`` (``docs/hmhsa_cffn_design.md#forms``).
        **kwargs: Other arguments of mmdet's ``PyramidVisionTransformerV2``.
    """

    def __init__(self,
                 arch='b1',
                 hmhsa=True,
                 cffn=True,
                 cffn_ratio=0.5,
                 cffn_branches=2,
                 deploy=False,
                 ihh_kernel=3,
                 hmhsa_form='auto',
                 **kwargs):
        if arch not in PVTV2_ARCHS:
            raise ValueError(f'unknown PVTv2 arch {arch!r}; choose from '
                             f'{sorted(PVTV2_ARCHS)}')
        kwargs = {**PVTV2_ARCHS[arch], **kwargs}
        super().__init__(**kwargs)
        self.deploy = deploy
        check_hmhsa_form(hmhsa_form)
        self.hmhsa_stages = resolve_hmhsa_stages(hmhsa, self.num_heads)
        self.cffn_stages = resolve_layers(cffn, self.num_stages, 'cffn')
        attn_drop = kwargs.get('attn_drop_rate', 0.)
        drop = kwargs.get('drop_rate', 0.)
        norm_cfg = kwargs.get('norm_cfg', dict(type='LN', eps=1e-6))
        for i, (_, blocks, _) in enumerate(self.layers):
            for block in blocks:
                if i in self.hmhsa_stages:
                    old = block.attn
                    path = old.dropout_layer
                    block.attn = HallucinatedSRA(
                        embed_dims=old.embed_dims,
                        num_heads=old.num_heads,
                        attn_drop=attn_drop,
                        proj_drop=drop,
                        dropout_layer=dict(
                            type='DropPath',
                            drop_prob=path.drop_prob if isinstance(
                                path, DropPath) else 0.),
                        qkv_bias=old.attn.in_proj_bias is not None,
                        norm_cfg=norm_cfg,
                        sr_ratio=old.sr_ratio,
                        kernel_size=ihh_kernel,
                        hmhsa_form=hmhsa_form)
                if i in self.cffn_stages:
                    compact_ffn(block.ffn, cffn_ratio, cffn_branches, deploy)

    #: reads official (whai362) / mmdet PVTv2 checkpoints
    read_host_checkpoint = staticmethod(pvtv2_state_dict)

    def stage_shapes(self, hw_shape):
        """The token map ``(H_i, W_i)`` of each stage for an input size.

        Args:
            hw_shape (tuple[int, int]): The input ``(H, W)``.

        Returns:
            list[tuple[int, int]]: One per stage.
        """
        shapes = []
        for patch_embed, _, _ in self.layers:
            padding = getattr(patch_embed, 'adap_padding', None)  # mmdet's
            if padding is not None:
                pad = padding.get_pad_shape(hw_shape)
                hw_shape = tuple(n + p for n, p in zip(hw_shape, pad))
            conv = patch_embed.projection
            hw_shape = tuple(
                (n + 2 * p - d * (k - 1) - 1) // s + 1
                for n, k, s, p, d in zip(hw_shape, conv.kernel_size,
                                         conv.stride, conv.padding,
                                         conv.dilation))
            shapes.append(hw_shape)
        return shapes

    def _fits(self, hw_shape):
        """Whether every stage map is at least its ``sr_ratio`` a side."""
        return all(
            min(shape) >= max(sr, 1)
            for shape, sr in zip(self.stage_shapes(hw_shape), self.sr_ratios))

    def min_input_size(self, limit=4096):
        """The smallest input side every stage accepts (at most ``limit``)."""
        return next((n for n in range(1, limit) if self._fits((n, n))),
                    limit)

    def check_input_size(self, hw_shape):
        """Refuse an input too small for the spatial reductions.

        Args:
            hw_shape (tuple[int, int]): The input ``(H, W)``.
        """
        for i, (shape, sr) in enumerate(
                zip(self.stage_shapes(hw_shape), self.sr_ratios)):
            if min(shape) < max(sr, 1):
                raise ValueError(
                    f'input {hw_shape[0]}x{hw_shape[1]} gives stage {i} a '
                    f'{shape[0]}x{shape[1]} token map, smaller than its '
                    f'sr_ratio {sr} (the spatial-reduction kernel); with '
                    f'sr_ratios={list(self.sr_ratios)} PVTv2 (upstream '
                    f'too) needs inputs of at least '
                    f'{self.min_input_size()} px a side')

    def forward(self, x):
        """Args:
            x (Tensor): Images ``(B, 3, H, W)``, at least
                :meth:`min_input_size` a side.

        Returns:
            tuple[Tensor]: ``(B, C_i, H_i, W_i)`` maps of ``out_indices``.
        """
        check_in_channels(x, self.layers[0][0].projection.in_channels, 4)
        self.check_input_size(tuple(x.shape[-2:]))
        return tuple(super().forward(x))
