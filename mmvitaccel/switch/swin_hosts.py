"""The Swin hosts' arguments in the form of the class a method's backbone
subclasses: mmdet's ``SwinTransformer`` for STViT-R, STViT and DGSSA
(:func:`swin_host_args`), mmpretrain's for HViT (:func:`mmpretrain_swin_args`)
and mmaction's ``SwinTransformer3D`` for Video Swin (:func:`swin3d_host_args`),
with the upstream defaults filled in where two classes' defaults differ,
and notes of what changed (``Host.notes``).
"""
from mmvitaccel.switch.host_classes import signature_defaults, zoo_sizes

__all__ = ['swin_sizes', 'swin3d_sizes', 'swin_host_args',
           'mmpretrain_swin_args', 'swin3d_host_args']


def _mmpretrain_arch(arch):
    from mmpretrain.models.backbones.swin_transformer import SwinTransformer
    return zoo_sizes(SwinTransformer, arch, 'mmpretrain Swin')


def swin_sizes(host):
    """Set ``host``'s depths, heads, width and window (a 2-D Swin)."""
    defaults, _ = signature_defaults(host.toolbox, host.type)
    args = host.args
    if host.toolbox == 'mmpretrain':
        sizes = _mmpretrain_arch(args.get('arch', defaults['arch']))
        window = _stage_window(args.get('stage_cfgs'))
    else:
        sizes = {k: args.get(k, defaults[k])
                 for k in ('embed_dims', 'depths', 'num_heads')}
        window = None
    host.depths = tuple(sizes['depths'])
    host.num_heads = tuple(sizes['num_heads'])
    host.embed_dims = sizes['embed_dims']
    host.window_size = window or args.get('window_size',
                                          defaults['window_size'])


def swin3d_sizes(host):
    """Set ``host``'s depths, heads, width and spatial window (Video
    Swin)."""
    defaults, cls = signature_defaults(host.toolbox, host.type)
    arch = zoo_sizes(cls, host.args.get('arch', defaults.get('arch')),
                     'mmaction Swin3D')
    host.depths = tuple(arch['depths'])
    host.num_heads = tuple(arch['num_heads'])
    host.embed_dims = arch['embed_dims']
    host.window_size = tuple(host.args.get('window_size',
                                           defaults['window_size']))[1]


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
    defaults, _ = signature_defaults(host.toolbox, host.type)
    mmdet_defaults, _ = signature_defaults('mmdet', 'SwinTransformer')
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
    arch = args.pop('arch', defaults['arch'])
    sizes = _mmpretrain_arch(arch)
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
    """mmaction's ``SwinTransformer3D`` arguments as configured, the
    ``arch`` (a size name of upstream's ``arch_zoo`` or a dict) and the
    window explicit.

    Args:
        host (Host): a ``'swin3d'`` host.

    Returns:
        dict: keyword arguments.
    """
    defaults, _ = signature_defaults(host.toolbox, host.type)
    args = dict(host.args)
    args.setdefault('arch', defaults.get('arch'))
    args['window_size'] = tuple(args.get('window_size',
                                         defaults['window_size']))
    return args


#: mmdet/mmseg Swin block arguments and where mmpretrain's Swin takes them
#: (``stage_cfgs.block_cfgs``), with mmdet's defaults
_BLOCK_ARGS = {
    'mlp_ratio': (('ffn_ratio', ), 4),
    'qkv_bias': (('attn_cfgs', 'qkv_bias'), True),
    'qk_scale': (('attn_cfgs', 'qk_scale'), None),
    'attn_drop_rate': (('attn_cfgs', 'attn_drop'), 0.),
    'act_cfg': (('ffn_cfgs', 'act_cfg'), dict(type='GELU')),
}
#: mmdet/mmseg Swin arguments mmpretrain's takes under the same name
_SAME_NAME = ('in_channels', 'patch_size', 'window_size', 'drop_path_rate',
              'use_abs_pos_embed', 'with_cp', 'frozen_stages', 'norm_cfg',
              'out_indices', 'init_cfg')


def mmpretrain_swin_args(host):
    """Every argument of mmpretrain's ``SwinTransformer`` (what HViT-Swin
    subclasses) that reproduces ``host``.

    mmpretrain's own Swin passes through. mmdet's and mmseg's are
    translated: ``embed_dims``, ``depths``, ``num_heads`` to an ``arch``
    dict, ``pretrain_img_size`` to ``img_size``, the block arguments
    (``mlp_ratio``, ``qkv_bias``, ``qk_scale``, ``attn_drop_rate``,
    ``act_cfg``) to ``stage_cfgs.block_cfgs`` where they differ from the
    defaults, ``drop_rate`` (mmdet's applies after the position embedding,
    in every attention projection and FFN) to all three places, and
    ``out_indices`` always explicit (mmdet's default is all four stages,
    mmpretrain's the last), ``pad_small_map=True`` (mmdet's Swin pads and
    shifts a map no larger than a window). ``convert_weights`` is dropped (our reader
    converts the official layout by itself) and ``pretrained`` becomes an
    ``init_cfg``.

    Args:
        host (Host): a ``'swin'`` host.

    Returns:
        dict: mmpretrain ``SwinTransformer`` keyword arguments.

    Raises:
        ValueError: for an mmdet argument mmpretrain's Swin cannot express
            (``strides`` other than ``(4, 2, 2, 2)``, ``patch_norm=False``).
    """
    if host.toolbox == 'mmpretrain':
        return dict(host.args)
    defaults, _ = signature_defaults(host.toolbox, host.type)
    args = dict(host.args)
    get = lambda k: args.get(k, defaults[k])  # noqa: E731
    # mmdet's Swin pads (and shifts) a map no larger than a window, as
    # mmpretrain's does with pad_small_map=True
    out = dict(arch=dict(embed_dims=get('embed_dims'),
                         depths=list(get('depths')),
                         num_heads=list(get('num_heads'))),
               img_size=get('pretrain_img_size'),
               out_indices=tuple(get('out_indices')), pad_small_map=True)
    if tuple(get('strides')) != (4, 2, 2, 2) or not get('patch_norm'):
        raise ValueError(
            f'{host.toolbox} Swin strides={get("strides")!r}, patch_norm='
            f'{get("patch_norm")!r} have no counterpart in mmpretrain\'s Swin '
            '(what hvit builds on); only strides (4, 2, 2, 2) with a patch '
            'norm convert')
    for key in _SAME_NAME:
        if key in args:
            out[key] = args[key]
    blocks = {}
    for key, (path, neutral) in _BLOCK_ARGS.items():
        if get(key) != neutral:
            _set(blocks, path, get(key))
    if get('drop_rate'):
        out['drop_rate'] = get('drop_rate')
        _set(blocks, ('attn_cfgs', 'proj_drop'), get('drop_rate'))
        _set(blocks, ('ffn_cfgs', 'ffn_drop'), get('drop_rate'))
    if blocks:
        out['stage_cfgs'] = dict(block_cfgs=blocks)
        host.notes.append(f'block arguments -> stage_cfgs.block_cfgs '
                          f'{sorted(blocks)}')
    if args.get('pretrained') and not args.get('init_cfg'):
        out['init_cfg'] = dict(type='Pretrained',
                               checkpoint=args['pretrained'])
        host.notes.append('pretrained moved to init_cfg')
    if args.get('convert_weights'):
        host.notes.append('convert_weights dropped: our reader converts the '
                          'official Swin layout by itself')
    host.notes.append(f'{host.toolbox} Swin sizes -> mmpretrain arch dict, '
                      'pretrain_img_size -> img_size')
    return out


def _set(tree, path, value):
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value
