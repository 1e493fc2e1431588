"""The Swin arch table and the Swin base of STViT, STViT-R and DGSSA.

:data:`~.archs.SWIN_ARCHS` (in :mod:`.archs`, which needs no mmdet) is
the one table of Swin sizes in this package.
:class:`SwinBase` is the base of every Swin backbone that changes Swin's
blocks or stages (STViT, STViT-R, DGSSA-Swin): mmdet's ``SwinTransformer``
with an ``arch`` argument, its full configuration kept as ``swin_cfg``, and
a forward that refuses other channel counts clearly and returns a tuple.

Why mmdet's Swin is the base:

* checkpoint keys: mmdet's Swin has the official (and mmseg) layout,
  ``stages.{i}.downsample`` at the end of stage ``i``, and
  :func:`~mmvitaccel.models.utils.swin_state_dict` maps official,
  mmdet/mmseg and mmpretrain checkpoints onto it;
* the detection (Cascade Mask R-CNN) and segmentation (UperNet) configs
  take its 4-level NCHW pyramid, and the classifier configs its last level;
* the layers the methods build are mmdet's (``CrossAttentionSwinBlock``
  and ``MaskedWindowSwinBlock`` subclass its ``SwinBlock``;
  ``StaticShiftWindowMSA`` takes the place and the parameter names of its
  ``ShiftWindowMSA``), and the parity tests compare the backbones with the
  method off to mmdet's Swin, bit-exact.

HViT-Swin (``HViTSwinTransformer``) stays on mmpretrain's
``SwinTransformer``, for reasons of layers and parity rather than keys (in
mmpretrain 1.x the parameter names are mmdet's, ``downsample`` at the end of
a stage; only the output norms differ: ``norm{i}`` for ``out_indices``): its
hMHSA (``HallucinatedWindowMSA``) subclasses mmpretrain's ``WindowMSA`` and
its small-map attention mmpretrain's ``ShiftWindowMSA`` (``pad_small_map``),
it relies on mmpretrain's load hooks that resize relative position tables
and the absolute position embedding to the window, and its tests pin
bit-exact parity with mmpretrain's Swin classifier with hMHSA and cFFN off.
It takes mmpretrain's ``arch`` names, which give the same sizes as
:data:`SWIN_ARCHS`.
"""
import inspect

from mmdet.models.backbones.swin import SwinTransformer

from mmvitaccel.models.utils.archs import SWIN_ARCHS
from mmvitaccel.models.utils.checks import check_in_channels


def swin_config(arch, kwargs):
    """The arguments of mmdet's ``SwinTransformer`` for ``arch``.

    Args:
        arch (str | None): ``'tiny'``, ``'small'`` or ``'base'`` sets
            ``embed_dims``, ``depths`` and ``num_heads``; None keeps the
            explicit ones (or upstream's defaults).
        kwargs (dict): the other arguments of mmdet's ``SwinTransformer``.

    Returns:
        tuple[dict, dict]: the arguments to build it with (``kwargs`` plus
        the arch's sizes) and every argument with upstream's defaults
        filled in.

    Raises:
        ValueError: for an unknown ``arch``.
    """
    kwargs = dict(kwargs)
    if arch is not None:
        if arch not in SWIN_ARCHS:
            raise ValueError(f'unknown arch {arch!r}; choose from '
                             f'{sorted(SWIN_ARCHS)}')
        kwargs.update(SWIN_ARCHS[arch])
    args = inspect.signature(SwinTransformer.__init__).bind(None, **kwargs)
    args.apply_defaults()
    cfg = dict(args.arguments)
    cfg.pop('self')
    return kwargs, cfg


class SwinBase(SwinTransformer):
    """mmdet's ``SwinTransformer`` with a size name and its configuration.

    Args:
        arch (str | None): ``'tiny'``, ``'small'`` or ``'base'``
            (:data:`SWIN_ARCHS`); None keeps the explicit ``embed_dims``,
            ``depths`` and ``num_heads``.
        **kwargs: the arguments of mmdet's ``SwinTransformer``.

    Attributes:
        swin_cfg (dict): every argument of mmdet's ``SwinTransformer`` the
            model was built with, defaults included.
    """

    def __init__(self, arch=None, **kwargs):
        kwargs, cfg = swin_config(arch, kwargs)
        super().__init__(**kwargs)
        self.swin_cfg = cfg

    def forward(self, x):
        """Upstream's forward, with a clear error for an input of other
        than ``in_channels`` channels.

        Args:
            x (Tensor): images ``(B, C_in, H, W)``, any size.

        Returns:
            tuple[Tensor]: NCHW maps of ``out_indices`` (mmdet's Swin
            returns a list; a tuple also suits mmpretrain's necks).
        """
        check_in_channels(x, self.patch_embed.projection.in_channels, 4)
        return tuple(super().forward(x))
