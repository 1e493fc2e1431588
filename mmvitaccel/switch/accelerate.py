"""One switch: an upstream config with its backbone accelerated
(:func:`accelerate_config`, ``tools/accelerate.py``).

The new config changes only ``model.backbone`` (and what the method needs
beside it): every argument the upstream backbone was configured with is
carried over (:mod:`mmvitaccel.switch.hosts` translates them where our
backbone subclasses another toolbox's class), the method's placement comes
from its paper's setting scaled to the host's depth (:mod:`.placement`),
and a checkpoint the config loads stays where it is: our backbones read
upstream's layouts (``mmvitaccel.models.utils.checkpoint``).

Example::

    from mmvitaccel.switch import accelerate_config
    cfg = accelerate_config(
        'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py', 'stvit-r')
"""
import copy
import os.path as osp

from mmengine.config import Config

from mmvitaccel.models.utils.config import config_path
from mmvitaccel.switch.hosts import find_host
from mmvitaccel.switch.placement import METHODS, Upstream, method_backbone

__all__ = ['METHODS', 'accelerate_config', 'acceleration',
           'accelerated_config_text', 'checked_hooks',
           'load_upstream_config']

#: what every accelerated config adds: the package's registries
CUSTOM_IMPORT = 'mmvitaccel'
#: and the hook that reads upstream checkpoints through our readers
CHECK_HOOK = 'CheckpointCheckHook'


def load_upstream_config(config):
    """A config from a file, a ``toolbox::path`` of an installed toolbox, or
    a loaded :class:`~mmengine.config.Config` (returned as is)."""
    if isinstance(config, Config):
        return config
    if not isinstance(config, str):
        raise TypeError(f'config must be a path, "toolbox::path" or a '
                        f'Config, got {type(config).__name__}')
    path = config_path(config)
    if not osp.isfile(path):
        raise FileNotFoundError(f'no config file {config!r} ({path}; an '
                                'installed toolbox\'s config is '
                                '"toolbox::path")')
    return Config.fromfile(path)


def _toolbox_of(config):
    """The toolbox of a ``toolbox::path`` name, else None."""
    if isinstance(config, str) and '::' in config:
        return config.split('::', 1)[0]
    return None


def acceleration(cfg, method, toolbox=None, config=None, checkpoint=None,
                 **options):
    """What :func:`accelerate_config` changes in ``cfg``: a config delta.

    Args:
        cfg (mmengine.Config): the upstream config, merged.
        method (str): a key of :data:`~.placement.METHODS`.
        toolbox (str, optional): the scope of a config that sets no
            ``default_scope`` (one its toolbox's API builds in its own
            scope); the new config sets it.
        config (str | dict, optional): how a teacher names the upstream
            config (a ``toolbox::path`` or file); default its model dict.
        checkpoint (str, optional): the upstream weights (default: the
            config's ``load_from``); the new config starts from them.
        **options: the method backbone's arguments to set (over the paper's
            setting and the carried host arguments).

    Returns:
        tuple[dict, list[str]]: the delta (``model.backbone`` with
        ``_delete_=True``, ``custom_imports``, ``custom_hooks`` with the
        checkpoint check (:func:`checked_hooks`), and the method's other
        changes) and notes of what was translated.
    """
    host = find_host(cfg, toolbox)
    upstream = Upstream(cfg, config or cfg.model.to_dict(),
                        checkpoint or cfg.get('load_from'))
    backbone, extra = method_backbone(method, host, options, upstream)
    imports = list((cfg.get('custom_imports') or {}).get('imports', []))
    if CUSTOM_IMPORT not in imports:
        imports.append(CUSTOM_IMPORT)
    delta = dict(custom_imports=dict(imports=imports,
                                     allow_failed_imports=False),
                 model=dict(backbone=dict(_delete_=True, **backbone)))
    if not cfg.get('default_scope'):
        delta['default_scope'] = host.toolbox
    for key, value in extra.items():
        target = delta
        *parents, leaf = key.split('.')
        for parent in parents:
            target = target.setdefault(parent, {})
        target[leaf] = value
    # the method's hooks (if it adds any, over the upstream ones), or the
    # upstream ones; then the checkpoint check
    delta['custom_hooks'] = checked_hooks(
        delta.get('custom_hooks', cfg.to_dict().get('custom_hooks')))
    return delta, list(host.notes)


def checked_hooks(hooks):
    """``hooks`` with :class:`~mmvitaccel.engine.CheckpointCheckHook` added,
    so that a written config reads an upstream checkpoint through our
    backbones' readers (DGSSA's V from QKV, hMHSA's halved Q and K, another
    toolbox's Swin names) under any runner: upstream ``tools/train.py``,
    ``mim train`` or ``Runner.from_cfg``, not only ours.

    Args:
        hooks (list[dict] | None): a config's ``custom_hooks``.

    Returns:
        list[dict]: the hooks (kept as they are), then ours, once.
    """
    hooks = copy.deepcopy(list(hooks or []))
    if not any(str(h.get('type', '')).split('.')[-1] == CHECK_HOOK
               for h in hooks):
        hooks.append(dict(type=f'mmvitaccel.{CHECK_HOOK}'))
    return hooks


def accelerate_config(cfg, method, checkpoint=None, **options):
    """``cfg`` with its backbone replaced by ``method``'s.

    Args:
        cfg (str | mmengine.Config): a config file, ``toolbox::path``
            (e.g. ``'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'``)
            or a loaded config.
        method (str): a key of :data:`~.placement.METHODS`.
        checkpoint (str, optional): the upstream model's weights: the new
            model starts from them (``load_from``), and the distilling
            methods (``sait``, ``asvit``, ``integrated``) distil from the
            upstream model with them, so they need them (default: the
            config's ``load_from``).
        **options: arguments of the method's backbone that override the
            paper's setting (``num_units=1``, ``static_init='uniform'``,
            ...).

    Returns:
        mmengine.Config: a new config (``cfg`` is not changed); what
        ``tools/accelerate.py`` writes loads to the same model.

    Raises:
        ValueError: the host is not one the method fits (the message names
            the hosts it fits and the methods that fit the host), too
            shallow for its placement, or ``options`` the method's backbone
            does not take: an unknown key (the message lists the allowed
            ones) or a value its validators refuse
            (:func:`~.switch_options.check_options`).
        FileNotFoundError: no such config file.
    """
    toolbox = _toolbox_of(cfg)
    name = _teacher_name(cfg)
    cfg = load_upstream_config(cfg)
    delta, _ = acceleration(cfg, method, toolbox, name, checkpoint,
                            **options)
    merged = Config._merge_a_into_b(delta, cfg.to_dict())
    return Config(merged, filename=cfg.filename)


def _teacher_name(config):
    """How a teacher names the upstream config given as ``config``: the
    ``toolbox::path``, a file's absolute path, or None for a loaded
    config (its model dict is used)."""
    if not isinstance(config, str):
        return None
    return config if '::' in config else osp.abspath(config)


def accelerated_config_text(config, out, method, checkpoint=None,
                            **options):
    """The text of a config file at ``out`` that inherits ``config`` and
    applies :func:`acceleration`.

    Args:
        config (str): a config file or ``toolbox::path``.
        out (str): where the file will be written (a file ``_base_`` is
            written relative to it).
        method (str): a key of :data:`~.placement.METHODS`.
        checkpoint (str, optional): as for :func:`accelerate_config`.
        **options: as for :func:`accelerate_config`.

    Returns:
        str: Python config text.
    """
    cfg = load_upstream_config(config)
    base = config if '::' in config else osp.relpath(
        osp.abspath(config), osp.dirname(osp.abspath(out)))
    # a teacher reads the upstream file relative to the written one
    name = config if '::' in config else '{{ fileDirname }}/' + base
    delta, notes = acceleration(cfg, method, _toolbox_of(config), name,
                                checkpoint, **options)
    lines = [f'# {method} on {config}, written by tools/accelerate.py '
             '(mmvitaccel.switch.accelerate_config).',
             '# The backbone carries every argument of the upstream one.']
    lines += [f'# - {note}' for note in notes]
    lines += [f'_base_ = {base!r}', '']
    lines += [f'{key} = {_python(value)}' for key, value in delta.items()]
    return '\n'.join(lines) + '\n'


def _python(value, indent=0):
    """``value`` as config source: dicts as ``dict(k=v)`` (one argument a
    line, in order) where the keys are names, the rest by ``repr``."""
    if isinstance(value, dict) and value and all(
            isinstance(k, str) and k.isidentifier() for k in value):
        pad = ' ' * (indent + 4)
        items = [f'{pad}{k}={_python(v, indent + 4)},'
                 for k, v in value.items()]
        return 'dict(\n' + '\n'.join(items) + '\n' + ' ' * indent + ')'
    if isinstance(value, dict):
        return '{' + ', '.join(f'{k!r}: {_python(v, indent)}'
                               for k, v in value.items()) + '}'
    return repr(value)
