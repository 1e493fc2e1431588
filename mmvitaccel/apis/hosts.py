"""Which upstream backbone a config holds, and its arguments in the form
our backbones take (:func:`find_host`).

A config names its backbone by a bare type (``'SwinTransformer'``) that
resolves in the config's ``default_scope``: mmpretrain's, mmdet's and
mmseg's ``SwinTransformer`` are three classes with different arguments.
:data:`HOST_KINDS` maps ``(toolbox, type)`` to the kind of host our methods
fit; :func:`swin_host_args` and :func:`swin3d_host_args` give every
argument the upstream backbone was configured with, translated to the
class our backbone subclasses (mmdet's ``SwinTransformer`` for the 2-D
Swin methods, mmaction's ``SwinTransformer3D`` for Video Swin), with the
upstream defaults filled in where the two classes' defaults differ, and
notes of what changed.
"""
import copy
import inspect
from dataclasses import dataclass, field

__all__ = ['HOST_KINDS', 'Host', 'find_host', 'swin_host_args',
           'swin3d_host_args']

#: ``(toolbox scope, backbone type)`` -> host kind
HOST_KINDS = {
    ('mmpretrain', 'SwinTransformer'): 'swin',
    ('mmdet', 'SwinTransformer'): 'swin',
    ('mmseg', 'SwinTransformer'): 'swin',
    ('mmaction', 'SwinTransformer3D'): 'swin3d',
}

#: where each toolbox's host class lives (for its signature)
_HOST_CLASSES = {
    ('mmpretrain', 'SwinTransformer'):
    ('mmpretrain.models.backbones.swin_transformer', 'SwinTransformer'),
    ('mmdet', 'SwinTransformer'): ('mmdet.models.backbones.swin',
                                   'SwinTransformer'),
    ('mmseg', 'SwinTransformer'): ('mmseg.models.backbones.swin',
                                   'SwinTransformer'),
    ('mmaction', 'SwinTransformer3D'): ('mmaction.models.backbones.swin',
                                        'SwinTransformer3D'),
}


@dataclass
class Host:
    """The upstream backbone of a config.

    Attributes:
        kind (str): a value of :data:`HOST_KINDS`.
        toolbox (str): the scope its type resolves in.
        type (str): the type without a scope.
        args (dict): the backbone's arguments as configured (no ``type``).
        depths (tuple[int]): blocks per stage.
        window_size (int): the spatial window side.
        notes (list[str]): what the translation changed.
    """
    kind: str
    toolbox: str
    type: str
    args: dict
    depths: tuple = ()
    window_size: int = 7
    notes: list = field(default_factory=list)


def _signature_defaults(toolbox, type_):
    import importlib
    module, name = _HOST_CLASSES[(toolbox, type_)]
    cls = getattr(importlib.import_module(module), name)
    return {k: p.default for k, p in
            inspect.signature(cls.__init__).parameters.items()
            if p.default is not inspect.Parameter.empty}, cls


def find_host(cfg, toolbox=None):
    """The upstream backbone of ``cfg`` (``cfg.model.backbone``).

    Args:
        cfg (mmengine.Config): a merged config.
        toolbox (str, optional): the scope to read the type in when the
            config sets no ``default_scope`` (a ``toolbox::`` config that a
            toolbox's API builds in its own scope, such as mmpretrain's
            GLIP backbones).

    Returns:
        Host: its kind, toolbox and arguments.

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
        raise ValueError(f'no method here fits the backbone {type_!r} of '
                         f'scope {toolbox!r}; the hosts are: {known}')
    args = copy.deepcopy(backbone.to_dict() if hasattr(backbone, 'to_dict')
                         else dict(backbone))  # plain dicts, the config's own
    args.pop('type')
    host = Host(kind, toolbox, type_, args)
    if kind == 'swin':
        host.args = swin_host_args(host)
        host.depths = tuple(host.args['depths'])
        host.window_size = host.args['window_size']
    else:
        host.args, host.depths = swin3d_host_args(host)
        host.window_size = host.args['window_size'][1]
    return host


#: mmpretrain Swin argument -> mmdet Swin argument
_MMPRETRAIN_RENAMED = {'img_size': 'pretrain_img_size'}
#: mmpretrain Swin arguments mmdet's has no counterpart of, and the value
#: under which dropping them changes nothing
_MMPRETRAIN_DROPPED = {
    'interpolate_mode': None,  # resizing a position table on load: ours
    'pad_small_map': None,  # mmdet's Swin always pads a small map
    'out_after_downsample': False,
    'norm_eval': False,
    'stage_cfgs': {},
    'patch_cfg': {},
}


def _stage_window(stage_cfgs):
    """The window of mmpretrain's ``stage_cfgs=dict(block_cfgs=dict(
    window_size=w))`` (how its 384 px configs set Swin's window), or None
    for any other ``stage_cfgs``."""
    if isinstance(stage_cfgs, dict) and set(stage_cfgs) == {'block_cfgs'}:
        blocks = stage_cfgs['block_cfgs']
        if isinstance(blocks, dict) and set(blocks) == {'window_size'}:
            return blocks['window_size']
    return None


def swin_host_args(host):
    """Every argument of mmdet's ``SwinTransformer`` (what the 2-D Swin
    methods subclass) that reproduces ``host``.

    mmdet's and mmseg's Swins take the same arguments (mmseg's has no
    ``convert_weights``) and pass through. mmpretrain's is translated:
    ``arch`` to ``embed_dims``, ``depths`` and ``num_heads`` (its own size
    table, ``arch_zoo``), ``img_size`` to ``pretrain_img_size``, and its
    defaults where they differ from mmdet's (``out_indices=(3, )``); its
    ``init_cfg`` is kept only when it loads a checkpoint (mmdet's Swin
    reads any ``init_cfg`` as one, and initialises as upstream otherwise).

    Args:
        host (Host): a ``'swin'`` host.

    Returns:
        dict: mmdet ``SwinTransformer`` keyword arguments, the sizes and
        window always explicit; what changed is added to ``host.notes``.

    Raises:
        ValueError: for an mmpretrain argument mmdet's Swin cannot express
            (``out_after_downsample=True``, ``stage_cfgs``, ...).
    """
    defaults, _ = _signature_defaults(host.toolbox, host.type)
    mmdet_defaults, _ = _signature_defaults('mmdet', 'SwinTransformer')
    args = dict(host.args)
    if host.toolbox != 'mmpretrain':
        out = args
        for key in ('embed_dims', 'depths', 'num_heads', 'window_size'):
            out.setdefault(key, defaults[key])
        if out.get('pretrained') and not out.get('init_cfg'):
            out['init_cfg'] = dict(type='Pretrained',
                                   checkpoint=out.pop('pretrained'))
            host.notes.append('pretrained moved to init_cfg')
        out.pop('pretrained', None)
        out['depths'] = tuple(out['depths'])
        out['num_heads'] = tuple(out['num_heads'])
        return out
    from mmpretrain.models.backbones.swin_transformer import \
        SwinTransformer as MMPretrainSwin
    arch = args.pop('arch', defaults['arch'])
    if isinstance(arch, str):
        key = arch.lower()
        if key not in MMPretrainSwin.arch_zoo:
            raise ValueError(f'unknown mmpretrain Swin arch {arch!r}; '
                             f'choose from {sorted(MMPretrainSwin.arch_zoo)}')
        sizes = MMPretrainSwin.arch_zoo[key]
    else:
        sizes = arch
    out = dict(embed_dims=sizes['embed_dims'], depths=tuple(sizes['depths']),
               num_heads=tuple(sizes['num_heads']))
    window = _stage_window(args.get('stage_cfgs'))
    if window is not None:
        args.pop('stage_cfgs')
        args['window_size'] = window
        host.notes.append(f'stage_cfgs block window_size {window} -> '
                          'window_size')
    for key, value in args.items():
        if key in _MMPRETRAIN_DROPPED:
            neutral = _MMPRETRAIN_DROPPED[key]
            if neutral is not None and value != neutral:
                raise ValueError(
                    f'mmpretrain Swin {key}={value!r} has no counterpart in '
                    f'the Swin the methods build on (mmdet\'s); only '
                    f'{neutral!r} converts')
            host.notes.append(f'{key}={value!r} dropped (mmdet\'s Swin: '
                              'the same computation)')
            continue
        if key == 'init_cfg':
            value = _pretrained_only(value, host)
            if value is None:
                continue
        out[_MMPRETRAIN_RENAMED.get(key, key)] = value
    for key in ('img_size', 'patch_size', 'window_size', 'drop_path_rate',
                'out_indices'):
        name = _MMPRETRAIN_RENAMED.get(key, key)
        if name not in out and defaults[key] != mmdet_defaults.get(name):
            out[name] = defaults[key]
    out.setdefault('window_size', defaults['window_size'])
    host.notes.append(f'mmpretrain arch {arch!r} -> embed_dims, depths, '
                      'num_heads')
    return out


def _pretrained_only(init_cfg, host):
    """The checkpoint-loading entry of an ``init_cfg`` (dict or list), or
    None; the rest (mmpretrain's weight initialisers) noted as dropped."""
    entries = init_cfg if isinstance(init_cfg, (list, tuple)) else [init_cfg]
    kept = [e for e in entries if e and e.get('type') == 'Pretrained']
    if len(kept) < len(entries):
        host.notes.append('init_cfg initialisers dropped: mmdet\'s Swin '
                          'initialises as upstream')
    if not kept:
        return None
    entry = dict(kept[0])
    entry.pop('prefix', None)  # our readers take a classifier's backbone.*
    return entry


def swin3d_host_args(host):
    """mmaction's ``SwinTransformer3D`` arguments as configured, the window
    explicit, and its stage depths.

    Args:
        host (Host): a ``'swin3d'`` host.

    Returns:
        tuple[dict, tuple[int]]: keyword arguments (``arch`` as configured,
        a size name of upstream's ``arch_zoo`` or a dict) and the depths.
    """
    defaults, cls = _signature_defaults(host.toolbox, host.type)
    args = dict(host.args)
    arch = args.setdefault('arch', defaults.get('arch'))
    if isinstance(arch, str):
        if arch.lower() not in cls.arch_zoo:
            raise ValueError(f'unknown mmaction Swin3D arch {arch!r}; '
                             f'choose from {sorted(cls.arch_zoo)}')
        depths = cls.arch_zoo[arch.lower()]['depths']
    else:
        depths = arch['depths']
    args['window_size'] = tuple(args.get('window_size',
                                         defaults['window_size']))
    return args, tuple(depths)
