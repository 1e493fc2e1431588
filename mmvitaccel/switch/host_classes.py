"""What a host is: the upstream backbone types our methods fit
(:data:`HOST_KINDS`), where each class lives, the :class:`Host` that the
readers fill, and the two readings of an upstream class that every reader
needs (:func:`signature_defaults`, :func:`zoo_sizes`)."""
import importlib
import inspect
from dataclasses import dataclass, field

__all__ = ['HOST_CLASSES', 'HOST_KINDS', 'HOST_NAMES', 'Host',
           'signature_defaults', 'zoo_sizes']

#: ``(toolbox scope, backbone type)`` -> host kind
HOST_KINDS = {
    ('mmpretrain', 'SwinTransformer'): 'swin',
    ('mmdet', 'SwinTransformer'): 'swin',
    ('mmseg', 'SwinTransformer'): 'swin',
    ('mmaction', 'SwinTransformer3D'): 'swin3d',
    ('mmpretrain', 'VisionTransformer'): 'vit',
    ('mmdet', 'PyramidVisionTransformerV2'): 'pvtv2',
}

#: the host kinds, as a refusal names them
HOST_NAMES = {
    'swin': 'mmpretrain/mmdet/mmseg SwinTransformer',
    'swin3d': 'mmaction SwinTransformer3D',
    'vit': 'mmpretrain VisionTransformer (ViT, DeiT)',
    'pvtv2': 'mmdet PyramidVisionTransformerV2',
}

#: where each toolbox's host class lives (for its signature and sizes)
HOST_CLASSES = {
    ('mmpretrain', 'SwinTransformer'):
    ('mmpretrain.models.backbones.swin_transformer', 'SwinTransformer'),
    ('mmdet', 'SwinTransformer'): ('mmdet.models.backbones.swin',
                                   'SwinTransformer'),
    ('mmseg', 'SwinTransformer'): ('mmseg.models.backbones.swin',
                                   'SwinTransformer'),
    ('mmaction', 'SwinTransformer3D'): ('mmaction.models.backbones.swin',
                                        'SwinTransformer3D'),
    ('mmpretrain', 'VisionTransformer'):
    ('mmpretrain.models.backbones.vision_transformer', 'VisionTransformer'),
}  # (PVTv2 takes **kwargs: its defaults are mmdet PVT's, _pvt_defaults)

@dataclass
class Host:
    """The upstream backbone of a config.

    Attributes:
        kind (str): a value of :data:`HOST_KINDS`.
        toolbox (str): the scope its type resolves in.
        type (str): the type without a scope.
        args (dict): the backbone's arguments as configured (no ``type``).
        depths (tuple[int]): blocks per stage (one stage for a ViT).
        num_heads (tuple[int]): heads per stage.
        embed_dims (int): the first stage's width.
        window_size (int): the spatial window side (Swin hosts).
        num_patches (int): the patch tokens at ``img_size`` (ViT hosts).
        notes (list[str]): what the translations changed.
    """
    kind: str
    toolbox: str
    type: str
    args: dict
    depths: tuple = ()
    num_heads: tuple = ()
    embed_dims: int = 0
    window_size: int = 7
    num_patches: int = 0
    notes: list = field(default_factory=list)


def signature_defaults(toolbox, type_):
    """The keyword defaults of a host class, and the class."""
    module, name = HOST_CLASSES[(toolbox, type_)]
    cls = getattr(importlib.import_module(module), name)
    return {k: p.default for k, p in
            inspect.signature(cls.__init__).parameters.items()
            if p.default is not inspect.Parameter.empty}, cls


def zoo_sizes(cls, arch, name):
    """The sizes an upstream class's ``arch`` names: a key of its
    ``arch_zoo`` (any case) or a dict, as a dict.

    Args:
        cls (type): the upstream class (with ``arch_zoo``).
        arch (str | dict): as configured.
        name (str): the class as an error names it.

    Raises:
        ValueError: an unknown size name, with the known ones.
    """
    if isinstance(arch, str):
        if arch.lower() not in cls.arch_zoo:
            raise ValueError(f'unknown {name} arch {arch!r}; choose from '
                             f'{sorted(cls.arch_zoo)}')
        return dict(cls.arch_zoo[arch.lower()])
    return dict(arch)
