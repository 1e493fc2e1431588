"""hMHSA in mmdet's PVT ``SpatialReductionAttention`` (needs mmdet)."""
import torch.nn as nn
from mmdet.models.backbones.pvt import SpatialReductionAttention
from mmdet.models.layers import nchw_to_nlc, nlc_to_nchw

from mmvitaccel.models.hvit.hmhsa_attention import HallucinatedAttentionMixin

__all__ = ['HallucinatedSRA']


class HallucinatedSRA(HallucinatedAttentionMixin, SpatialReductionAttention):
    """hMHSA inside PVT's spatial-reduction attention (mmdet): ``attn``
    becomes ``q``, ``k``, ``v``, ``proj``; IHH on the ``H // sr x W // sr``
    key grid.

    Args:
        embed_dims (int): ``C``.
        num_heads (int): ``h``, even.
        attn_drop (float): Attention dropout.
        proj_drop (float): Dropout after ``proj``.
        dropout_layer (dict): Drop path config.
        qkv_bias (bool): Biases on ``q``, ``k``, ``v``.
        norm_cfg (dict): Norm after ``sr``.
        sr_ratio (int): Spatial reduction ratio.
        kernel_size (int): IHH filter side.
        hmhsa_form (str): ``'explicit'``, ``'fused'``, ``'stacked'`` or
            ``'auto'`` (:func:`~mmvitaccel.ops.hmhsa.hallucinated_attention`).
        init_cfg (dict, optional): Init config.
    """

    def __init__(self,
                 embed_dims,
                 num_heads,
                 attn_drop=0.,
                 proj_drop=0.,
                 dropout_layer=None,
                 qkv_bias=True,
                 norm_cfg=dict(type='LN'),
                 sr_ratio=1,
                 kernel_size=3,
                 init_cfg=None,
                 hmhsa_form='auto'):
        super().__init__(
            embed_dims,
            num_heads,
            attn_drop=attn_drop,
            proj_drop=proj_drop,
            dropout_layer=dropout_layer,
            batch_first=True,
            qkv_bias=qkv_bias,
            norm_cfg=norm_cfg,
            sr_ratio=sr_ratio,
            init_cfg=init_cfg)
        del self.attn  # nn.MultiheadAttention: fused Q, K, V of C each
        self._init_hallucinated(embed_dims, num_heads, qkv_bias, kernel_size,
                                form=hmhsa_form)
        self.attn_drop_rate = attn_drop
        self.proj = nn.Linear(embed_dims, embed_dims)

    def forward(self, x, hw_shape, identity=None):
        """Args:
            x (Tensor): ``(B, H * W, C)``.
            hw_shape (tuple[int, int]): ``(H, W)``.
            identity (Tensor, optional): Shortcut; ``x`` by default.

        Returns:
            Tensor: ``identity + DropPath(Proj(hMHSA(x)))``.
        """
        grid = tuple(hw_shape)
        x_kv = x
        if self.sr_ratio > 1:
            x_kv = self.sr(nlc_to_nchw(x, hw_shape))
            grid = tuple(x_kv.shape[2:])  # the reduced key grid
            x_kv = self.norm(nchw_to_nlc(x_kv))
        if identity is None:
            identity = x
        drop = self.attn_drop_rate if self.training else 0.
        out = self.proj(self._attend(x, x_kv, grid, dropout_p=drop))
        return identity + self.dropout_layer(self.proj_drop(out))
