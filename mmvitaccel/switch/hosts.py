"""Which upstream backbone a config holds, its sizes, and its arguments in
the form our backbones take (:func:`find_host`).

A config names its backbone by a bare type (``'SwinTransformer'``) that
resolves in the config's ``default_scope``: mmpretrain's, mmdet's and
mmseg's ``SwinTransformer`` are three classes with different arguments.
:data:`~.host_classes.HOST_KINDS` maps ``(toolbox, type)`` to the kind of
host our methods fit. :class:`~.host_classes.Host` keeps the arguments as configured and the sizes the
placement rules read; the translations to the class a method's backbone
subclasses are in :mod:`.swin_hosts` (Swin, Video Swin) and here
(:func:`vit_host_args`, :func:`pvtv2_host_args`).
"""
import copy
import inspect
import math

from mmvitaccel.switch import swin_hosts
from mmvitaccel.switch.host_classes import (HOST_KINDS, HOST_NAMES,
                                            Host, signature_defaults,
                                            zoo_sizes)

__all__ = ['find_host', 'pvtv2_host_args', 'vit_host_args']

#: types a toolbox defines (or ``(scope, type)``) that none of our methods
#: fits, with the reason and the route there is (a refusal says it)
_NOT_HOSTS = {
    'DistilledVisionTransformer':
    'a distilled DeiT carries a distillation token and a two-token head '
    '(DeiTClsHead); accelerate the same size\'s non-distilled DeiT config '
    '(mmpretrain::deit/deit-small_4xb256_in1k.py, ...)',
    ('mmseg', 'VisionTransformer'):
    'mmseg\'s ViT is no host; the supported route for a dense ViT is '
    'mmpretrain\'s ViT pruned in the backbone, model.backbone '
    'type=\'mmvitaccel.TokenPrunedVisionTransformer\' with '
    'out_type=\'tokens\', and the neck TokenRestoreNeck (type '
    '\'mmvitaccel.TokenRestoreNeck\') that puts the kept tokens back on '
    'the patch grid for the decode head, as '
    'configs/pruned_deit_s_upernet_ade20k.py does on mmseg\'s DeiT-S '
    'UperNet (docs/token_pruning.md)',
}


def find_host(cfg, toolbox=None):
    """The upstream backbone of ``cfg`` (``cfg.model.backbone``).

    Args:
        cfg (mmengine.Config): a merged config.
        toolbox (str, optional): the scope to read the type in when the
            config sets no ``default_scope`` (a ``toolbox::`` config that a
            toolbox's API builds in its own scope, such as mmpretrain's
            GLIP backbones).

    Returns:
        Host: its kind, toolbox, arguments and sizes.

    Raises:
        ValueError: no ``model.backbone``, one of this package already, or
            a type no method here fits (the message lists those that do).
    """
    model = cfg.get('model')
    backbone = model.get('backbone') if model is not None else None
    if backbone is None or 'type' not in backbone:
        raise ValueError('the config has no model.backbone with a type; '
                         'accelerate_config replaces model.backbone')
    toolbox = cfg.get('default_scope') or toolbox or 'mmengine'
    type_ = backbone['type']
    if not isinstance(type_, str):
        raise ValueError(f'model.backbone.type must be a registered name, '
                         f'got {type_!r}')
    if '.' in type_:
        toolbox, type_ = type_.split('.', 1)
    if toolbox == 'mmvitaccel':
        raise ValueError(f'model.backbone is already mmvitaccel.{type_}: '
                         'accelerate the upstream config it came from')
    kind = HOST_KINDS.get((toolbox, type_))
    if kind is None:
        known = ', '.join(f'{t} ({s})' for s, t in HOST_KINDS)
        why = _NOT_HOSTS.get((toolbox, type_), _NOT_HOSTS.get(type_))
        why = f' ({why})' if why else ''
        raise ValueError(f'no method here fits the backbone {type_!r} of '
                         f'scope {toolbox!r}{why}; the hosts are: {known}')
    args = copy.deepcopy(backbone.to_dict() if hasattr(backbone, 'to_dict')
                         else dict(backbone))  # plain dicts, the config's own
    args.pop('type')
    host = Host(kind, toolbox, type_, args)
    sizes = dict(swin=swin_hosts.swin_sizes, swin3d=swin_hosts.swin3d_sizes,
                 vit=_vit_sizes, pvtv2=_pvtv2_sizes)[kind]
    sizes(host)
    return host


def _vit_arch(arch):
    from mmpretrain.models.backbones import VisionTransformer
    return zoo_sizes(VisionTransformer, arch, 'mmpretrain ViT')


def _grid_side(size, kernel, stride, padding):
    """Patch tokens along one side: a conv of ``kernel``/``stride``, with
    mmcv's ``'corner'`` padding (to a stride multiple) or an int one."""
    if isinstance(padding, str):
        return math.ceil(size / stride)
    return (size + 2 * padding - kernel) // stride + 1


def _vit_sizes(host):
    defaults, _ = signature_defaults(host.toolbox, host.type)
    arch = _vit_arch(host.args.get('arch', defaults['arch']))
    img = host.args.get('img_size', defaults['img_size'])
    patch = host.args.get('patch_size', defaults['patch_size'])
    patch_cfg = host.args.get('patch_cfg') or {}
    kernel = patch_cfg.get('kernel_size', patch)
    stride = patch_cfg.get('stride', patch)
    padding = patch_cfg.get('padding', 'corner')
    h, w = (img, img) if isinstance(img, int) else img
    host.depths = (arch['num_layers'], )
    host.num_heads = (arch['num_heads'], )
    host.embed_dims = arch['embed_dims']
    host.num_patches = _grid_side(h, kernel, stride, padding) * _grid_side(
        w, kernel, stride, padding)


def vit_host_args(host):
    """The arguments of mmpretrain's ``VisionTransformer`` (what our ViT
    backbones subclass) that reproduce ``host``: as configured, but for an
    ``arch`` our backbones read differently. They take ``'tiny'``,
    ``'small'`` and ``'base'`` as DeiT's sizes (the papers' hosts), where
    mmpretrain's ``'small'`` is its 8-layer ViT-S; such a name is given as
    mmpretrain's own size dict.

    Args:
        host (Host): a ``'vit'`` host.

    Returns:
        dict: keyword arguments (``arch`` always explicit).
    """
    from mmvitaccel.models.utils.archs import DEIT_ARCHS
    defaults, _ = signature_defaults(host.toolbox, host.type)
    args = dict(host.args)
    arch = args.get('arch', defaults['arch'])
    if isinstance(arch, str) and arch.lower() in DEIT_ARCHS:
        args['arch'] = _vit_arch(arch)
        host.notes.append(f'arch {arch!r} given as mmpretrain\'s sizes (our '
                          f'backbones read {arch!r} as DeiT\'s)')
    else:
        args['arch'] = arch
    return args


#: mmdet PVTv2 sizes our ``arch`` names; the rest of its defaults are the
#: class's
_PVTV2_SIZES = ('embed_dims', 'num_layers', 'mlp_ratios')


def _pvt_defaults():
    """mmdet PVT's defaults (PVTv2 passes its arguments on to it)."""
    from mmdet.models.backbones.pvt import PyramidVisionTransformer
    return {k: p.default for k, p in inspect.signature(
        PyramidVisionTransformer.__init__).parameters.items()
            if p.default is not inspect.Parameter.empty}


def _pvtv2_sizes(host):
    defaults = _pvt_defaults()
    layers = host.args.get('num_layers', defaults['num_layers'])
    heads = host.args.get('num_heads', defaults['num_heads'])
    host.depths = tuple(layers)
    host.num_heads = tuple(heads)
    host.embed_dims = host.args.get('embed_dims', defaults['embed_dims'])


def pvtv2_host_args(host):
    """The arguments of our PVTv2 backbone that reproduce an mmdet
    ``PyramidVisionTransformerV2``: its sizes explicit (they override our
    ``arch`` names), and a checkpoint ``init_cfg`` typed ``Pretrained``
    (mmdet's PVTv2 configs give ``init_cfg=dict(checkpoint=...)``, which
    its own loader reads but ours needs typed).

    Args:
        host (Host): a ``'pvtv2'`` host.

    Returns:
        dict: keyword arguments.
    """
    defaults = _pvt_defaults()
    args = dict(host.args)
    for key in _PVTV2_SIZES:
        args.setdefault(key, defaults[key])
    init_cfg = args.get('init_cfg')
    if isinstance(init_cfg, dict) and init_cfg.get('checkpoint') and \
            'type' not in init_cfg:
        args['init_cfg'] = dict(type='Pretrained', **init_cfg)
        host.notes.append('init_cfg typed Pretrained (mmdet\'s PVTv2 reads an '
                          'untyped checkpoint entry; ours needs the type)')
    if args.get('pretrained') and not args.get('init_cfg'):
        args['init_cfg'] = dict(type='Pretrained',
                                checkpoint=args.pop('pretrained'))
        host.notes.append('pretrained moved to init_cfg')
    args.pop('pretrained', None)
    return args
