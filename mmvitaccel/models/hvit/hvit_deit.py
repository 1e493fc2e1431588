"""hMHSA + cFFN on DeiT (mmpretrain ``VisionTransformer``)."""
from mmpretrain.models.backbones import VisionTransformer

from mmvitaccel.ops import check_even_heads, check_hmhsa_form
from mmvitaccel.registry import MODELS
from mmvitaccel.models.hvit.hmhsa_attention import (HViTEncoderLayer,
                                                    resolve_hmhsa_stages)
from mmvitaccel.models.utils import deit_state_dict
from mmvitaccel.models.utils.vit import (FrozenStagesMixin, embed_tokens,
                                         run_layers, vit_layer_cfgs)
from mmvitaccel.models.hvit.hvit_base import HViTHostMixin, resolve_layers
from mmvitaccel.models.utils.archs import DEIT_ARCHS


@MODELS.register_module()
class HViTDeiT(HViTHostMixin, FrozenStagesMixin, VisionTransformer):
    """DeiT with hallucinated attention maps (hMHSA) and a compact FFN.

    Chosen layers are :class:`HViTEncoderLayer`s: ``h / 2`` real maps and
    ``h / 2`` hallucinated by IHH (3x3 depth-wise on the key grid) and CHH
    (1x1 across maps); cFFN factors ``ffn.layers.1`` into ``U V`` of rank
    ``k = t m C / (m + 1)``. Neither: mmpretrain's ``VisionTransformer``.

    Args:
        arch (str | dict): ``'deit-tiny'``/``'deit-small'``/``'deit-base'``
            (or ``'tiny'`` etc.), a ``VisionTransformer`` arch, or a dict;
            even heads where hMHSA is used (not DeiT-T).
        hmhsa (bool | Sequence[int]): hMHSA in all layers, none, or these.
        cffn (bool | Sequence[int]): cFFN in all layers, none, or these.
        cffn_ratio (float): Compact ratio ``t``.
        cffn_branches (int): ``r`` branches while training.
        deploy (bool): Build cFFN folded (to load a converted checkpoint).
        ihh_kernel (int): IHH filter side (3).
        hmhsa_form (str): ``'explicit'``, ``'fused'``, ``'stacked'`` or
            ``'auto'`` (``docs/hmhsa_cffn_design.md#forms``).
        **kwargs: Other ``VisionTransformer`` arguments.
    """

    def __init__(self,
                 arch='deit-small',
                 hmhsa=True,
                 cffn=True,
                 cffn_ratio=0.5,
                 cffn_branches=2,
                 deploy=False,
                 ihh_kernel=3,
                 hmhsa_form='auto',
                 **kwargs):
        check_hmhsa_form(hmhsa_form)
        if isinstance(arch, str):
            arch = DEIT_ARCHS.get(arch.lower(), arch.lower())
        super().__init__(arch=arch, **kwargs)
        heads = self.arch_settings['num_heads']
        if hmhsa is True:  # one head count for all layers: refuse odd ones
            check_even_heads(heads, 'every DeiT layer')
        attn_layers = resolve_hmhsa_stages(
            hmhsa if isinstance(hmhsa, bool) else tuple(hmhsa),
            [heads] * self.num_layers)
        ffn_layers = resolve_layers(cffn, self.num_layers, 'cffn')
        self.hmhsa_layers, self.cffn_layers = attn_layers, ffn_layers
        self.deploy = deploy
        # upstream's per-layer arguments (its layer_cfgs override ours)
        layer_cfgs = vit_layer_cfgs(self, dict(kwargs, arch=arch))
        for i in range(self.num_layers):
            cfg = dict(
                hmhsa=i in attn_layers,
                cffn=i in ffn_layers,
                cffn_ratio=cffn_ratio,
                cffn_branches=cffn_branches,
                deploy=deploy,
                num_extra_tokens=self.num_extra_tokens,
                ihh_kernel=ihh_kernel,
                hmhsa_form=hmhsa_form)
            cfg.update(layer_cfgs[i])
            self.layers[i] = HViTEncoderLayer(**cfg)
        self.refreeze()  # upstream froze the layers before they changed

    #: reads official / mmpretrain DeiT checkpoints
    read_host_checkpoint = staticmethod(deit_state_dict)

    def _prepare_host_state_dict(self, state_dict):
        """Resize the position embedding to this ``img_size``."""
        self._prepare_pos_embed(state_dict, prefix='')

    def forward(self, x):
        """Upstream's forward, giving each layer the patch grid (IHH).

        Args:
            x (Tensor): Images ``(B, 3, H_img, W_img)``.

        Returns:
            tuple[Tensor]: One output per ``out_indices``, by ``out_type``.
        """
        x, patch_resolution = embed_tokens(self, x)
        return run_layers(
            self,
            x,
            patch_resolution,
            step=lambda i, layer, x: layer(x, patch_resolution))[0]
