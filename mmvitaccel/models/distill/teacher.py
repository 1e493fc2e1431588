"""Frozen teachers: built without weights, loaded in ``init_weights``, held
outside the student's state dict (why: ``docs/distillation.md``)."""
import copy
from collections import OrderedDict

import torch.nn as nn
from mmengine.logging import MMLogger
from mmengine.registry import DefaultScope

from mmvitaccel.registry import MODELS
from mmvitaccel.models.utils.checkpoint import (load_with_report,
                                                read_state_dict)
from mmvitaccel.models.utils.config import load_config_file

__all__ = ['build_teacher', 'load_teacher_weights', 'freeze', 'TeacherMixin']

#: keys of the ``dict(config=...)`` form of a teacher
_CONFIG_FORM_KEYS = ('config', 'checkpoint', 'init_cfg')


def freeze(module):
    """Gradients off and eval mode, in place; returns ``module``.

    Args:
        module (nn.Module): the teacher.
    """
    for p in module.parameters():
        p.requires_grad_(False)
    module.eval()  # some backbones' train() returns None
    return module


def _is_pretrained(init_cfg):
    return isinstance(init_cfg, dict) and (
        init_cfg.get('type') == 'Pretrained') and bool(
            init_cfg.get('checkpoint'))


def _model_config(config):
    """The ``model`` of a config as a dict, without the student's own
    ``init_cfg`` (and its backbone's) and ``train_cfg``.

    Args:
        config (str | dict): a config path, ``toolbox::`` name or model dict.
    """
    if isinstance(config, str):
        config = load_config_file(config).model
    if not isinstance(config, dict):
        raise ValueError('teacher.config must be a config file or a model '
                         f'dict, got {config!r}')
    config = copy.deepcopy(dict(config))
    config.pop('init_cfg', None)
    if isinstance(config.get('backbone'), dict):
        config['backbone'] = dict(config['backbone'])
        config['backbone'].pop('init_cfg', None)
    config.pop('train_cfg', None)
    return config


def build_teacher(cfg):
    """Build a frozen teacher without loading its weights.

    Args:
        cfg (dict | nn.Module): ``dict(config=..., checkpoint=...)`` (a
            config file or model dict, built in the ``mmpretrain`` scope
            without its ``init_cfg`` and ``train_cfg``), a model dict with a
            ``type``, or a module used as it is.

    Returns:
        nn.Module: the frozen teacher; its ``init_cfg`` is ``Pretrained``
        when it has weights to load (:func:`load_teacher_weights`).

    Raises:
        ValueError: ``cfg`` is none of these, or has unknown keys.
    """
    if isinstance(cfg, nn.Module):
        return freeze(cfg)
    if not isinstance(cfg, dict) or not ('config' in cfg or 'type' in cfg):
        raise ValueError('teacher must be dict(config=..., checkpoint=...), '
                         f'a model dict with a type, or a module; got {cfg!r}')
    cfg = copy.deepcopy(dict(cfg))
    if 'config' in cfg:
        unknown = sorted(set(cfg) - set(_CONFIG_FORM_KEYS))
        if unknown:
            raise ValueError(f'unknown teacher keys {unknown}; with config= '
                             f'the keys are {_CONFIG_FORM_KEYS}')
        init_cfg = dict(cfg.get('init_cfg') or {})
        checkpoint = cfg.get('checkpoint') or init_cfg.get('checkpoint')
        with DefaultScope.overwrite_default_scope('mmpretrain'):
            model = MODELS.build(_model_config(cfg['config']))
        model.init_cfg = dict(init_cfg, type='Pretrained',
                              checkpoint=checkpoint) if checkpoint else None
    else:
        init_cfg = cfg.get('init_cfg')
        if _is_pretrained(init_cfg):
            cfg.pop('init_cfg')
        model = MODELS.build(cfg)
        if _is_pretrained(init_cfg):
            model.init_cfg = dict(init_cfg)
    return freeze(model)


def load_teacher_weights(teacher, converter=None, logger=None):
    """Give a teacher built by :func:`build_teacher` its weights (its
    ``Pretrained`` checkpoint's ``prefix`` part, converted, loaded with a
    report), or else run its own ``init_weights`` once; freeze it again.

    Args:
        teacher (nn.Module): the teacher.
        converter (callable, optional): ``state_dict -> state_dict`` into
            the teacher's names (e.g. ``deit_state_dict``).
        logger (MMLogger, optional): where the report goes.

    Returns:
        dict | None: the report of :func:`load_with_report`, or None.
    """
    init_cfg = getattr(teacher, 'init_cfg', None)
    report = None
    if _is_pretrained(init_cfg):
        state_dict = read_state_dict(init_cfg['checkpoint'])
        prefix = init_cfg.get('prefix')
        if prefix and any(k.startswith(prefix) for k in state_dict):
            state_dict = OrderedDict((k[len(prefix):], v)
                                     for k, v in state_dict.items()
                                     if k.startswith(prefix))
        if converter is not None:
            state_dict = converter(state_dict)
        report = load_with_report(teacher, state_dict, logger=logger)
    elif hasattr(teacher, 'init_weights') and \
            not getattr(teacher, 'is_init', False):
        teacher.init_weights()
    freeze(teacher)
    return report


def _migrate_teacher_keys(module, state_dict, prefix, *args):
    """``load_state_dict`` pre-hook: a checkpoint's teacher keys go to the
    held teacher (or are dropped), absent ``distill_only`` modules' dropped."""
    logger = MMLogger.get_current_instance()
    what = type(module).__name__
    for name in module.teacher_names:
        start = f'{prefix}{name}.'
        keys = [k for k in state_dict if k.startswith(start)]
        if not keys:
            continue
        weights = OrderedDict((k[len(start):], state_dict.pop(k))
                              for k in keys)
        teacher = module.get_teacher(name)
        if teacher is None:
            logger.warning(f'{what}: dropped the {len(keys)} `{name}.*` '
                           f'keys of the checkpoint (this model has no '
                           f'{name})')
        else:
            logger.warning(f'{what}: the checkpoint keeps its {name} in '
                           f'the state dict (an earlier convention); its '
                           f'{len(keys)} tensors go to the frozen {name}, '
                           f'which is held outside the state dict')
            load_with_report(teacher, weights, logger=logger, min_share=0)
    for name in module.distill_only:
        start = f'{prefix}{name}.'
        keys = [k for k in state_dict if k.startswith(start)]
        if keys and getattr(module, name, None) is None:
            for k in keys:
                state_dict.pop(k)
            logger.warning(f'{what}: dropped the {len(keys)} `{name}.*` '
                           f'keys of the checkpoint (training only; this '
                           f'model has no {name})')


class TeacherMixin:
    """Frozen teachers of a classifier, held outside its module tree:
    ``class C(TeacherMixin, ImageClassifier)``, :meth:`add_teacher` in
    ``__init__``.

    Attributes:
        teacher_names (tuple[str]): the names a teacher may have (their keys
            in an old checkpoint move into the teacher).
        distill_only (tuple[str]): trainable, training-only modules, whose
            keys are dropped when the attribute is None.
        teacher_load_reports (dict): per teacher, its last load's report.
    """

    teacher_names = ('teacher', )
    distill_only = ()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # plain dicts: nn.Module registers modules only, not dicts of them
        self._teachers = {}
        self._teacher_converters = {}
        self.teacher_load_reports = {}
        self._register_load_state_dict_pre_hook(
            _migrate_teacher_keys, with_module=True)

    def add_teacher(self, name, cfg, checkpoint=None, converter=None):
        """Build, hold and return a frozen teacher (no weights read).

        Args:
            name (str): one of :attr:`teacher_names`.
            cfg (dict | nn.Module): see :func:`build_teacher`.
            checkpoint (str, optional): its weights, overriding the config's.
            converter (callable, optional): see :func:`load_teacher_weights`.
        """
        if name not in self.teacher_names:
            raise ValueError(f'teacher name must be one of '
                             f'{self.teacher_names}, got {name!r}')
        teacher = build_teacher(cfg)
        if checkpoint:
            teacher.init_cfg = dict(type='Pretrained', checkpoint=checkpoint)
        self._teachers[name] = teacher
        self._teacher_converters[name] = converter
        return teacher

    def get_teacher(self, name='teacher'):
        """The frozen teacher called ``name``, or None."""
        return self.__dict__.get('_teachers', {}).get(name)

    @property
    def teacher(self):
        """The frozen teacher, or None."""
        return self.get_teacher('teacher')

    def init_weights(self):
        """The classifier's ``init_weights``, then the teachers' weights."""
        super().init_weights()
        for name, teacher in self._teachers.items():
            self.teacher_load_reports[name] = load_teacher_weights(
                teacher, self._teacher_converters[name])

    def train(self, mode=True):
        """Set the train mode everywhere but in the frozen teachers."""
        super().train(mode)
        for teacher in self.__dict__.get('_teachers', {}).values():
            teacher.eval()
        return self

    def _apply(self, fn, recurse=True):
        """Apply ``fn`` (``.to()``, ``.half()`` ...) to teachers too."""
        super()._apply(fn, recurse)
        for teacher in self.__dict__.get('_teachers', {}).values():
            teacher._apply(fn, recurse)
        return self
