"""The Swin base of STViT, STViT-R and DGSSA-Swin: mmdet's Swin with an
``arch`` (why mmdet's: ``docs/architecture.md``)."""
import inspect

from mmdet.models.backbones.swin import SwinTransformer

from mmvitaccel.models.utils.archs import SWIN_ARCHS
from mmvitaccel.models.utils.checks import check_in_channels


def swin_config(arch, kwargs):
    """The arguments of mmdet's ``SwinTransformer`` for ``arch``.

    Args:
        arch (str | None): a key of :data:`SWIN_ARCHS`; None: explicit sizes.
        kwargs (dict): the other arguments of mmdet's ``SwinTransformer``.

    Returns:
        tuple[dict, dict]: the build arguments; all, with upstream defaults.

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
        arch (str | None): a key of :data:`SWIN_ARCHS`; None: explicit sizes.
        **kwargs: the arguments of mmdet's ``SwinTransformer``.

    Attributes:
        swin_cfg (dict): every argument it was built with, defaults included.
    """

    def __init__(self, arch=None, **kwargs):
        kwargs, cfg = swin_config(arch, kwargs)
        super().__init__(**kwargs)
        self.swin_cfg = cfg

    def forward(self, x):
        """Upstream's forward, refusing other than ``in_channels`` channels.

        Args:
            x (Tensor): images ``(B, C_in, H, W)``.

        Returns:
            tuple[Tensor]: NCHW maps of ``out_indices``.
        """
        check_in_channels(x, self.patch_embed.projection.in_channels, 4)
        return tuple(super().forward(x))
