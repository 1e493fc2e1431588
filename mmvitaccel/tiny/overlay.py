"""The tiny overlay: run any config on generated data at CPU scale.

:func:`tinyfy_config` rewrites a loaded config, leaving the recipe's model,
losses, optimizer and pipelines in place, so that it trains and tests in
minutes on a CPU:

* every dataset of the train/val/test dataloaders is pointed at a tiny
  generated dataset of the same kind (:mod:`mmvitaccel.tiny.data`):
  ``CocoDataset`` -> COCO, ``ADE20KDataset`` -> ADE20K, ``ImageNet`` /
  ``CustomDataset`` -> ImageNet layout, ``VideoDataset`` -> Kinetics. Every
  path under the recipe's data root (evaluator ``ann_file`` included) is
  re-rooted;
* sizes in the pipelines (``scale``, ``scales``, ``crop_size``,
  ``img_scale``) and in the model (``data_preprocessor.size``, sliding
  window ``crop_size``/``stride``) are multiplied by a per-task factor;
  video clips are shortened;
* the schedule is cut to ``max_epochs`` (or ``max_iters`` for iteration
  based loops) and the LR schedulers are rescaled to it; warm-ups counted in
  iterations inside epoch-based loops are capped to ``warmup_iters``;
* two-stage detectors sample at most ``rois`` RoIs per image and keep at
  most ``rois`` RPN proposals (the RoI heads dominate CPU time otherwise);
* batch sizes and workers are reduced, logging is frequent, checkpoints are
  written at the end, AMP is switched off when there is no GPU;
* downloadable weights (any ``scheme://`` in ``init_cfg``, ``pretrained``
  or ``load_from``) are dropped, since nothing can be downloaded at run
  time; local checkpoints are kept;
* ``RepeatDataset`` wrappers repeat once, so an epoch is one pass;
* every run is seeded (``randomness.seed=0`` where the recipe leaves it
  ``None``, as the mmpretrain bases do) and gets a
  :class:`~mmvitaccel.engine.StepSeedHook`, so that a killed run resumed
  with ``--resume`` ends with the same weights as an uninterrupted one.

Explicit ``--cfg-options`` win over the overlay: the tools pass them as
``cfg_options`` and they are applied again after it, so that e.g.
``default_hooks.checkpoint.interval=1`` keeps a checkpoint per epoch.

Options come from the keyword arguments and the config's ``tiny`` dict
(keyword arguments win), e.g. ``--cfg-options tiny.max_epochs=4``:

``data_root`` (a folder, generated if empty), ``kind`` (the generated
dataset, overriding the one the dataset type implies, e.g.
``'tinyimagenet'`` for a ``CustomDataset`` of 200 classes), ``scale`` (size
factor), ``overrides`` (dotted config keys applied only under the overlay,
e.g. settings that make sense from scratch, since remote weights are
dropped),
``max_epochs``, ``max_iters``, ``warmup_iters``, ``batch_size``,
``val_batch_size``, ``clip_len``, ``log_interval``, ``rois``.

The same overlay is reachable from any tool, upstream ones included, with
``--cfg-options runner_type=mmvitaccel.TinyRunner``.
"""
import copy
import warnings

from mmengine.config import ConfigDict

from mmvitaccel.tiny.data import TINY_DATA_KINDS, tiny_data_root
from mmvitaccel.tiny.schedule import shorten_schedule

#: dataset ``type`` (without scope) -> tiny dataset kind
DATASET_KINDS = {
    'CocoDataset': 'coco',
    'ADE20KDataset': 'ade20k',
    'ImageNet': 'imagenet',
    'CustomDataset': 'imagenet',
    'VideoDataset': 'kinetics',
}

#: per-kind multiplier of every size in pipelines and models
DEFAULT_SCALE = {
    'coco': 0.25,  # 1333x800 -> 333x200
    'ade20k': 0.25,  # 512 crops -> 128
    # classification keeps 224: upstream Swin refuses maps smaller than its
    # window in stage 4 (pad_small_map=False), and the cost is in the model
    'imagenet': 1.0,
    'tinyimagenet': 1.0,
    'kinetics': 0.25,  # 224 -> 56
}

DEFAULTS = dict(
    data_root=None,
    kind=None,
    overrides=None,
    scale=None,
    max_epochs=2,
    max_iters=20,
    warmup_iters=5,
    batch_size=2,
    val_batch_size=1,
    clip_len=8,
    log_interval=2,
    rois=64,
)

_SIZE_KEYS = ('scale', 'scales', 'crop_size', 'img_scale')
_DATALOADERS = ('train_dataloader', 'val_dataloader', 'test_dataloader')
_EVALUATORS = ('val_evaluator', 'test_evaluator')


def _scale_size(value, factor):
    """Multiply a size (int, ``-1`` kept, tuple, list of tuples) by factor."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if value <= 0 else max(1, int(round(value * factor)))
    if isinstance(value, (tuple, list)):
        scaled = [_scale_size(v, factor) for v in value]
        return type(value)(scaled)
    return value


def _walk(node, fn):
    """Apply ``fn`` to every dict in a nested config structure."""
    if isinstance(node, dict):
        fn(node)
        for value in node.values():
            _walk(value, fn)
    elif isinstance(node, (list, tuple)):
        for value in node:
            _walk(value, fn)


def _scale_pipeline(pipeline, factor, clip_len):
    """Shrink the sizes of every transform in a pipeline (in place)."""

    def visit(t):
        if 'type' not in t:
            return
        for key in _SIZE_KEYS:
            if key in t and not isinstance(t[key], float):
                t[key] = _scale_size(t[key], factor)
        if t['type'] in ('SampleFrames', 'mmaction.SampleFrames'):
            t['clip_len'] = min(t.get('clip_len', clip_len), clip_len)
            t['frame_interval'] = 1
            t['num_clips'] = 1

    _walk(pipeline, visit)


def _dataset_kind(dataset):
    """The tiny kind of a dataset config, looking through wrappers."""
    kinds = set()

    def visit(d):
        typ = d.get('type')
        if isinstance(typ, str):
            kind = DATASET_KINDS.get(typ.split('.')[-1])
            if kind:
                kinds.add(kind)

    _walk(dataset, visit)
    if len(kinds) != 1:
        found = sorted(kinds) or 'none'
        raise ValueError(
            f'The tiny overlay needs exactly one known dataset type per '
            f'dataloader (known: {sorted(DATASET_KINDS)}); found {found}.')
    return kinds.pop()


def _original_roots(dataset):
    """The folders the recipe expects its data in, e.g. ``['data/coco']``
    (one per dataset inside wrappers such as ``ConcatDataset``)."""
    roots = []

    def visit(d):
        if 'data_root' in d and isinstance(d['data_root'], str):
            roots.append(d['data_root'])
        elif 'ann_file' in d and isinstance(d['ann_file'], str):
            # mmaction style: no data_root, full paths in ann_file/prefix
            prefix = d.get('data_prefix') or {}
            if isinstance(prefix, str):
                prefix = dict(img=prefix)
            paths = [d['ann_file']] + [
                v for v in prefix.values() if isinstance(v, str) and v
            ]
            paths = [p for p in paths if p]
            if not paths:
                return
            common = paths[0].split('/')
            for path in paths[1:]:
                parts = path.split('/')
                n = 0
                while (n < min(len(common), len(parts))
                       and common[n] == parts[n]):
                    n += 1
                common = common[:n]
            if len(paths) == 1:
                common = common[:-1]
            roots.append('/'.join(common))

    _walk(dataset, visit)
    roots = sorted({r.rstrip('/') for r in roots})
    if not roots or not all(roots):
        raise ValueError('Cannot tell where this dataset expects its data '
                         '(no data_root and no common ann_file folder).')
    return roots


def _no_repeats(d):
    """One pass over the data per epoch: ``RepeatDataset.times = 1``."""
    if isinstance(d.get('type'), str) and \
            d['type'].split('.')[-1] == 'RepeatDataset':
        d['times'] = 1


def _reroot(node, old, new):
    """Replace the ``old`` folder prefix by ``new`` in every string."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, str):
                if value.rstrip('/') == old:
                    node[key] = new + ('/' if value.endswith('/') else '')
                elif value.startswith(old + '/'):
                    node[key] = new + value[len(old):]
            else:
                _reroot(value, old, new)
    elif isinstance(node, list):
        for item in node:
            _reroot(item, old, new)


def _is_remote(value):
    """Whether mmengine would download this checkpoint (``http://``,
    ``https://``, ``torchvision://``, ``open-mmlab://`` ...)."""
    return isinstance(value, str) and '://' in value


def _drop_remote_weights(model):
    """Remove downloadable checkpoints from a model config (in place).

    Returns:
        list[str]: the checkpoints that were removed.
    """
    dropped = []

    def visit(d):
        init = d.get('init_cfg')
        inits = init if isinstance(init, list) else [init]
        remote = [
            i for i in inits
            if isinstance(i, dict) and _is_remote(i.get('checkpoint'))
        ]
        if remote:
            dropped.extend(i['checkpoint'] for i in remote)
            kept = [i for i in inits if i not in remote]
            d['init_cfg'] = (kept if isinstance(init, list) else
                             (kept[0] if kept else None))
        if _is_remote(d.get('pretrained')):
            dropped.append(d['pretrained'])
            d['pretrained'] = None

    _walk(model, visit)
    return dropped


def _cap_rois(model, rois):
    """Cap RPN proposals and sampled RoIs of a two-stage detector."""

    def visit(d):
        sampler = d.get('sampler')
        if isinstance(sampler, dict) and 'num' in sampler:
            sampler['num'] = min(sampler['num'], rois)
        if 'nms_pre' in d and 'max_per_img' in d:  # RPN proposal settings
            d['max_per_img'] = min(d['max_per_img'], rois)
            d['nms_pre'] = min(d['nms_pre'], 4 * rois)

    for key in ('train_cfg', 'test_cfg'):
        _walk(model.get(key), visit)


def _cpu_optim_wrapper(cfg):
    """Swap AMP for plain fp32 when no GPU is present (AMP needs one)."""
    import torch
    wrapper = cfg.get('optim_wrapper')
    if (wrapper and wrapper.get('type') == 'AmpOptimWrapper'
            and not torch.cuda.is_available()):
        wrapper['type'] = 'OptimWrapper'
        for key in ('loss_scale', 'dtype', 'use_fsdp'):
            wrapper.pop(key, None)


def _seed_every_run(cfg):
    """Seed the run and make its random streams resumable (in place)."""
    randomness = dict(cfg.get('randomness') or {})
    if randomness.get('seed') is None:
        randomness['seed'] = 0
    cfg.randomness = randomness
    hooks = list(cfg.get('custom_hooks') or [])
    if not any(str(h.get('type', '')).split('.')[-1] == 'StepSeedHook'
               for h in hooks):
        hooks.append(dict(type='mmvitaccel.StepSeedHook'))
    cfg.custom_hooks = hooks


def tinyfy_config(cfg, cfg_options=None, **overrides):
    """Return a copy of ``cfg`` that runs on tiny data at CPU scale.

    Args:
        cfg (Config): a loaded config (any of the four toolboxes).
        cfg_options (dict, optional): the user's explicit ``--cfg-options``
            (already merged into ``cfg``); they are merged again after the
            overlay so that they win over it. ``tiny.*`` keys are the
            overlay's own options and are not re-applied.
        **overrides: options of the overlay; they take precedence over the
            config's ``tiny`` dict. See the module docstring for the keys.

    Returns:
        Config: the rewritten config. Applying it twice changes nothing.

    Raises:
        ValueError: for an unknown option or a dataset type the overlay
            cannot map to a tiny dataset.
    """
    if cfg.get('tiny', {}).get('applied', False):
        return cfg
    cfg = copy.deepcopy(cfg)
    opts = dict(DEFAULTS)
    user = dict(cfg.get('tiny', {}))
    user.update(overrides)
    unknown = set(user) - set(DEFAULTS) - {'applied'}
    if unknown:
        raise ValueError(f'Unknown tiny overlay options {sorted(unknown)}; '
                         f'valid ones are {sorted(DEFAULTS)}.')
    opts.update(user)
    if opts['overrides']:
        cfg.merge_from_dict(dict(opts['overrides']))
    if opts['kind'] is not None and opts['kind'] not in TINY_DATA_KINDS:
        raise ValueError(f'Unknown tiny dataset kind {opts["kind"]!r}; '
                         f'valid ones are {sorted(TINY_DATA_KINDS)}.')

    kinds = set()
    for name in _DATALOADERS:
        if not cfg.get(name):
            continue
        # a loader of its own: configs may share pipeline or dataset objects
        # between loaders (or with helper keys), which would otherwise be
        # rewritten once per loader that holds them
        # (set first, then read back: setting converts the dict anew)
        cfg[name] = copy.deepcopy(cfg.get(name))
        loader = cfg.get(name)
        dataset = loader['dataset']
        kind = opts['kind'] or _dataset_kind(dataset)
        kinds.add(kind)
        new_root = str(tiny_data_root(kind, opts['data_root']))
        for old_root in _original_roots(dataset):
            for node in [loader] + [cfg.get(e) for e in _EVALUATORS]:
                if node:
                    _reroot(node, old_root, new_root)
        _walk(dataset, _no_repeats)
        factor = opts['scale'] or DEFAULT_SCALE[kind]
        _scale_pipeline(dataset, factor, opts['clip_len'])
        train = name == 'train_dataloader'
        loader['batch_size'] = opts['batch_size'] if train else opts[
            'val_batch_size']
        loader['num_workers'] = 0
        loader['persistent_workers'] = False
    if len(kinds) > 1:
        raise ValueError(f'Dataloaders of different kinds: {sorted(kinds)}')
    # sizes that live in the model (mmseg crop sizes, sliding windows)
    if kinds and cfg.get('model'):
        factor = opts['scale'] or DEFAULT_SCALE[kinds.pop()]
        model = cfg.model
        preprocessor = model.get('data_preprocessor') or {}
        if 'size' in preprocessor:
            preprocessor['size'] = _scale_size(preprocessor['size'], factor)
        test_cfg = model.get('test_cfg') or {}
        for key in ('crop_size', 'stride'):
            if key in test_cfg:
                test_cfg[key] = _scale_size(test_cfg[key], factor)
        _cap_rois(model, opts['rois'])
        dropped = _drop_remote_weights(model)
        if _is_remote(cfg.get('load_from')):
            dropped.append(cfg.load_from)
            cfg.load_from = None
        if dropped:
            warnings.warn('tiny overlay: remote pretrained weights are not '
                          f'loaded: {dropped}')
    shorten_schedule(cfg, opts)
    _cpu_optim_wrapper(cfg)
    vis = (cfg.get('default_hooks') or {}).get('visualization')
    if vis:
        vis['draw'] = False
    _seed_every_run(cfg)
    cfg.env_cfg = ConfigDict(cfg.get('env_cfg') or {})
    cfg.env_cfg['cudnn_benchmark'] = False
    opts['applied'] = True
    cfg.tiny = opts
    explicit = {k: v for k, v in (cfg_options or {}).items()
                if k != 'tiny' and not k.startswith('tiny.')}
    if explicit:
        cfg.merge_from_dict(copy.deepcopy(explicit))
    return cfg
