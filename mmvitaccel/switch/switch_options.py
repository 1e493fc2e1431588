"""The options of the switch's methods (``tools/accelerate.py --options``,
the ``**options`` of :func:`~.accelerate.accelerate_config`): the arguments
each method's backbone takes (:func:`backbone_arguments`), checked with
their values before a config is written (:func:`check_options`), listed
with their defaults (:func:`method_options_text`, ``--list``), and the step
a written config needs next (:func:`next_step`).

The values are checked by the backbone's own validators: the backbone the
config would build is built once with its parameters on the meta device (no
memory, no initialisation), and on the CPU where that fails. Only the
parameters: upstream constructors read values (mmdet's Swin and PVTv2 their
drop path rates with ``item()``), which ``with torch.device('meta')``
refuses for every Swin host.
"""
import contextlib
import copy
import difflib
import inspect
import os.path as osp
import re
import warnings

import torch
from mmengine.registry import MODELS, DefaultScope
from torch.overrides import TorchFunctionMode

__all__ = ['backbone_class', 'backbone_arguments', 'check_options',
           'next_step']

_EMPTY = inspect.Parameter.empty
#: ``name (type): ...`` in a docstring's ``Args:``
_ARG_LINE = re.compile(r'^\s+\**(\w+) \(([^\n]+?)\):', re.M)


def backbone_class(type_):
    """The class of one of this package's backbones.

    Args:
        type_ (str): its registered name, with or without the scope
            (``'mmvitaccel.DGSSASwinTransformer'``).

    Returns:
        type: the class.

    Raises:
        KeyError: no such backbone is registered.
    """
    from mmvitaccel.registry import MODELS as OURS
    cls = OURS.get(type_.split('.')[-1])
    if cls is None:
        raise KeyError(f'no backbone {type_!r} is registered in mmvitaccel')
    return cls


def backbone_arguments(cls):
    """The keyword arguments ``cls`` takes: those of its ``__init__`` and
    those its ``**kwargs`` pass on, up the MRO to the first ``__init__``
    without ``**kwargs``. A base class's argument without a default is
    left out: the subclass gives it.

    Args:
        cls (type): a backbone class.

    Returns:
        dict[str, tuple]: ``name -> (default or inspect.Parameter.empty,
        the class that declares it)``, in MRO order.
    """
    out = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get('__init__')
        if init is None or klass is object:
            continue
        params = list(inspect.signature(init).parameters.values())[1:]
        for p in params:
            if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) or (
                    klass is not cls and p.default is _EMPTY):
                continue
            out.setdefault(p.name, (p.default, klass))
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    return out


def _documented_types(cls):
    """``{argument: type}`` as the classes' docstrings (``Args:``) give it,
    the subclass's first."""
    types = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get('__init__')
        for doc in (klass.__dict__.get('__doc__'), getattr(init, '__doc__',
                                                           None)):
            for name, type_ in _ARG_LINE.findall(doc or ''):
                types.setdefault(name, type_.strip())
    return types


def _upstream_class(cls):
    """The first class of ``cls``'s MRO, with an ``__init__``, that is not
    this package's (what the method's backbone subclasses)."""
    for klass in cls.__mro__:
        if '__init__' in klass.__dict__ and not \
                klass.__module__.startswith('mmvitaccel'):
            return klass
    return object


def _own(cls):
    """``cls``'s arguments that this package's classes declare."""
    return {k: v for k, (v, klass) in backbone_arguments(cls).items()
            if klass.__module__.startswith('mmvitaccel')}


def _class_name(klass):
    return f'{klass.__module__.split(".")[0]} {klass.__name__}'


def _defaults(arguments):
    return ', '.join(k if v is _EMPTY else f'{k}={v!r}'
                     for k, v in arguments.items())


def _one_line(err):
    text = err.args[0] if isinstance(err, KeyError) and err.args else err
    return ' '.join(str(text).split())


#: the factories parameters are made with (the meta build makes them there)
_PARAMETER_FACTORIES = {torch.empty, torch.zeros, torch.ones, torch.full,
                        torch.rand, torch.randn, torch.empty_strided}


class _ParametersOnMeta(TorchFunctionMode):
    """``with torch.device('meta')`` for the factories parameters are made
    with only: no memory, no initialisation, while ``linspace``,
    ``arange`` and ``tensor`` stay on the CPU, so that a constructor may
    read their values (mmdet's Swin its drop path rates, ``item()``)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in _PARAMETER_FACTORIES and kwargs.get('device') is None:
            kwargs['device'] = 'meta'
        return func(*args, **kwargs)


def _build(backbone, scope, meta):
    """Build ``backbone`` in ``scope`` (warnings silenced), its parameters
    on the meta device if ``meta``."""
    with warnings.catch_warnings(), \
            DefaultScope.overwrite_default_scope(scope), \
            _ParametersOnMeta() if meta else contextlib.nullcontext():
        warnings.simplefilter('ignore')
        return MODELS.build(copy.deepcopy(backbone))


def _shown(options):
    return ' '.join(f'{k}={v!r}' for k, v in options.items())


def check_options(method, backbone, options, scope):
    """Refuse ``options`` that the method's backbone cannot take, before a
    config is written: a key that is none of its arguments, a text where
    its docstring names no ``str``, and a value its own validators refuse
    (the backbone is built once, as the module docstring says).

    Args:
        method (str): the method (for the message).
        backbone (dict): the backbone config the config would hold, with
            ``options`` applied.
        options (dict): the options given.
        scope (str): the host's toolbox (the scope the config builds in).

    Raises:
        ValueError: naming the option, with the allowed keys (an unknown
            one), the documented type, or the validator's message (its
            range).
    """
    if not options:
        return
    type_ = backbone['type']
    cls = backbone_class(type_)
    arguments = backbone_arguments(cls)
    unknown = [k for k in options if k not in arguments]
    if unknown:
        close = {k: difflib.get_close_matches(k, arguments, 1)
                 for k in unknown}
        hints = ''.join(f' (did you mean {c[0]!r}?)' if c else ''
                        for c in close.values())
        raise ValueError(
            f'{method}: unknown option {", ".join(map(repr, unknown))} of '
            f'{type_}{hints}; its own options: {_defaults(_own(cls))}; and '
            f'the arguments of {_class_name(_upstream_class(cls))}: '
            f'{", ".join(k for k in arguments if k not in _own(cls))}')
    types = _documented_types(cls)
    for key, value in options.items():
        documented = types.get(key)
        default = arguments[key][0]
        if not isinstance(value, str):
            continue
        if documented is not None and 'str' not in documented:
            expected = documented
        elif documented is None and isinstance(default, (bool, int, float)):
            expected = type(default).__name__
        else:
            continue
        raise ValueError(
            f'{method}: option {key}={value!r} must be {expected} '
            f'({type_}\'s {key}; default {default!r})')
    try:
        _build(backbone, scope, meta=True)
        return
    except Exception:  # noqa: BLE001  the CPU build decides
        pass
    try:
        _build(backbone, scope, meta=False)
    except ImportError as err:  # the environment, not the options
        warnings.warn(f'the values of {_shown(options)} are not checked: '
                      f'{type_} does not build here ({err})')
    except Exception as err:  # noqa: BLE001  the validators' refusal
        raise ValueError(f'{method}: {type_} refuses the options '
                         f'{_shown(options)}: {_one_line(err)}') from None


def _pretrained_checkpoint(init_cfg):
    if isinstance(init_cfg, dict) and init_cfg.get('type') == 'Pretrained':
        return init_cfg.get('checkpoint')
    return None


def next_step(method, out, backbone, checkpoint=None, training_free=''):
    """The command a written config needs next, as ``tools/accelerate.py``
    prints it after ``wrote ...``.

    Args:
        method (str): the method.
        out (str): the written config.
        backbone (dict): its backbone config.
        checkpoint (str, optional): the upstream weights given.
        training_free (str): the method's ``training_free`` text.

    Returns:
        str: one or more lines, starting ``next:``.
    """
    weights = checkpoint or 'UPSTREAM.pth'
    if backbone.get('static_init') == 'dg':
        init = osp.splitext(out)[0] + '_dgssa_init.pth'
        host = checkpoint or _pretrained_checkpoint(
            backbone.get('init_cfg')) or 'HOST.pth'
        init_cfg = backbone.get('init_cfg')
        if init_cfg is None and 'init_cfg' in backbone or isinstance(
                init_cfg, dict) and init_cfg.get('type') not in (
                    None, 'Pretrained') or isinstance(init_cfg, list):
            load = (f'set model.backbone.init_cfg = dict(type=\'Pretrained\','
                    f' checkpoint=\'{init}\') in {out} and train it: '
                    f'python tools/train.py {out}')
        else:
            load = (f'python tools/train.py {out} --cfg-options '
                    'model.backbone.init_cfg.type=Pretrained '
                    f'model.backbone.init_cfg.checkpoint={init}')
        return (
            f"next: {method} starts its static attention from "
            f"static_init='dg': write the static logits (the host's mean "
            f'attention on the config\'s training images) with\n'
            f'  python tools/dgssa_init.py {out} --checkpoint {host} '
            f'--out {init} [--num-images 1000 --split train]\n'
            f'then\n  {load}\n'
            f"or write the config again with --options static_init="
            f"'uniform' (or 'local', 'random') to fine-tune without it")
    if training_free.startswith('yes'):
        return (f'next: training-free on the upstream weights: python '
                f'tools/test.py {out} {weights}\n'
                f'or fine-tune: python tools/train.py {out}')
    return f'next: fine-tune: python tools/train.py {out}'
