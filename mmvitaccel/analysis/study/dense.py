"""The dense evidence (``docs/study.md``, "Dense prediction"): detection and
segmentation on :class:`~mmvitaccel.datasets.DigitsInstances` /
:class:`~mmvitaccel.datasets.DigitsSegmentation` scenes, every row
fine-tuned from a pretrained classifier (the digits Swin host), as a user
fine-tunes from an ImageNet checkpoint.

The rows are the entries of :data:`DENSE_METHODS_FILE`, read by
:func:`load_dense_tasks` into :class:`DenseRow`. :func:`finetuned_checkpoint`
trains one per seed (cached as the classification study's models are,
:func:`~.training.config_key`), :func:`training_free_checkpoint` puts a dense
row's fine-tuned weights into a method's model with no training, and
:func:`test_metrics` runs the toolbox's own test loop on a checkpoint.
Measurements and outputs are in :mod:`.dense_report`.
"""
import copy
import json
import numbers
import os
import os.path as osp
from dataclasses import dataclass
from typing import Optional

import torch

from .training import (_run_tool_atomic, _slug, _train, config_key,
                       parallel_map)

__all__ = [
    'DENSE_METHODS_FILE', 'DENSE_HOSTS', 'DGSSA_IMAGES', 'DenseRow', 'HOST_LAYOUTS',
    'HOST_OPTION', 'official_host_checkpoint',
    'SWIN_HOST_CONFIG', 'dgssa_init_checkpoint', 'finetuned_checkpoint',
    'kept_checkpoints', 'learning_curve', 'load_dense_tasks', 'task_rows',
    'test_metrics',
    'training_free_checkpoint'
]

#: the dense rows, as data (relative to the repository root)
DENSE_METHODS_FILE = 'configs/study/dense/methods.py'

#: the pretrained Swin classifier every Swin row starts from
SWIN_HOST_CONFIG = 'configs/study/dense/swin_host.py'

#: the hosts a row may start from: the digits Swin host and the
#: classification study's DeiT host
DENSE_HOSTS = ('swin', 'deit')

#: the cfg key that receives the pretrained checkpoint of a row's backbone,
#: unless its task names another (``host_option``)
HOST_OPTION = 'model.backbone.init_cfg.checkpoint'

#: how a task's rows read the host: ``'as_trained'`` (the host checkpoint
#: itself, through the backbone's loader) or ``'official'`` (the Swin host
#: written in the official Swin layout, :func:`official_host_checkpoint`,
#: which upstream Video Swin inflates as it inflates an ImageNet Swin)
HOST_LAYOUTS = ('as_trained', 'official')

_FIELDS = ('name', 'config', 'host', 'dgssa_init', 'reference',
           'training_free', 'paper')


@dataclass
class DenseRow:
    """A trained row of the dense evidence: an entry of
    :data:`DENSE_METHODS_FILE`, which documents the fields.

    Attributes:
        task (str): ``'detection'`` or ``'segmentation'``.
        name (str): the CSV's method column.
        config (str): its config, relative to the repository root.
        host (str): one of :data:`DENSE_HOSTS`.
        dgssa_init (bool): the backbone starts from ``tools/dgssa_init.py``
            run on the host.
        reference (str | None): the dense row it is compared with.
        training_free (bool): the reference's fine-tuned weights are also
            tested in this row's model with no training.
        paper (str | None): what the method's paper reports for the task.
        host_option (str): the task's cfg key that receives the backbone's
            starting checkpoint.
        host_layout (str): one of :data:`HOST_LAYOUTS`, the task's.
    """
    task: str
    name: str
    config: str
    host: str
    dgssa_init: bool
    reference: Optional[str]
    training_free: bool
    paper: Optional[str]
    host_option: str = 'model.backbone.init_cfg.checkpoint'
    host_layout: str = 'as_trained'


def load_dense_tasks(path):
    """The tasks of a methods file (``TASKS``): ``{task: (metrics, rows)}``.

    Raises:
        ValueError: an entry with a missing or unknown field, an unknown
            host, or a reference that is not a dense row of its task.
    """
    from mmengine.config import Config
    tasks = Config.fromfile(path).TASKS
    out = {}
    for task, spec in tasks.items():
        unknown = set(spec) - {'metrics', 'rows', 'host_option',
                               'host_layout'}
        if unknown:
            raise ValueError(f'{path}: task {task} has unknown fields '
                             f'{sorted(unknown)}')
        layout = spec.get('host_layout', 'as_trained')
        if layout not in HOST_LAYOUTS:
            raise ValueError(f'{path}: task {task}: host_layout must be one '
                             f'of {HOST_LAYOUTS}, got {layout!r}')
        shared = dict(host_option=spec.get('host_option', HOST_OPTION),
                      host_layout=layout)
        rows = []
        for entry in spec['rows']:
            if set(entry) != set(_FIELDS):
                raise ValueError(f'{path}: {task} entry {entry.get("name")} '
                                 f'must have exactly the fields {_FIELDS}, '
                                 f'got {sorted(entry)}')
            if entry['host'] not in DENSE_HOSTS:
                raise ValueError(f'{path}: host must be one of '
                                 f'{DENSE_HOSTS}, got {entry["host"]!r}')
            rows.append(DenseRow(task=task, **entry, **shared))
        dense = {r.name for r in rows if r.reference is None}
        for row in rows:
            if row.reference is not None and row.reference not in dense:
                raise ValueError(f'{path}: {task} row {row.name!r} refers to '
                                 f'{row.reference!r}, which is not a dense '
                                 f'row of the task ({sorted(dense)})')
        out[task] = (tuple(spec['metrics']), rows)
    return out


def _row_config(repo, row, backbone_checkpoint, options=None):
    from ...apis.harness import load_config
    return load_config(
        osp.join(repo, row.config),
        {row.host_option: backbone_checkpoint, **(options or {})})


def official_host_checkpoint(checkpoint, out):
    """A Swin host written in the official Swin layout (``{'model':
    state_dict}``, :func:`~mmvitaccel.models.utils.swin_layout.
    swin_to_official`), as upstream Video Swin's ``inflate_weights`` reads
    an ImageNet Swin; written anew on every call (a few MB), so that it is
    never a stale host's.

    Returns:
        str: ``out``.
    """
    from ...models.utils.swin_layout import swin_to_official
    os.makedirs(osp.dirname(osp.abspath(out)), exist_ok=True)
    tmp = out + '.tmp'
    torch.save(dict(model=swin_to_official(checkpoint)), tmp)
    os.replace(tmp, out)
    return out


#: training scenes whose mean attention gives DGSSA's static logits
DGSSA_IMAGES = 512


def dgssa_init_checkpoint(repo, config, checkpoint, out,
                          num_images=DGSSA_IMAGES):
    """``tools/dgssa_init.py`` on ``checkpoint`` through ``config``'s
    training scenes (cached: ``out`` is reused when it exists).

    Returns:
        str: ``out``.
    """
    if not osp.isfile(out):
        _run_tool_atomic(repo, 'tools/dgssa_init.py', [
            config, '--checkpoint', checkpoint, '--out', '{out}',
            '--num-images', num_images, '--plot',
            osp.splitext(out)[0] + '.png'
        ], out)
    return out


def finetuned_checkpoint(repo, row, backbone_checkpoint, seed, cache_dir,
                         options=None, train=True, keep_every=None):
    """A row's fine-tuned weights for a seed: cached, or trained now with
    mmengine's runner from ``backbone_checkpoint``.

    Args:
        repo (str): the repository root.
        row (DenseRow): the row.
        backbone_checkpoint (str): what the backbone starts from (the host,
            or its DGSSA initialisation).
        seed (int): the training seed.
        cache_dir (str): one folder per row, seed and config text.
        options (dict, optional): more cfg options (part of the cache key).
        train (bool): train when nothing is cached (else return None).
        keep_every (int, optional): also keep the weights every so many
            epochs, for :func:`learning_curve` (not part of the cache key).

    Returns:
        str | None: the checkpoint.
    """
    cfg = _row_config(repo, row, backbone_checkpoint, options)
    # no validation while fine-tuning: the rows are tested on the test
    # split afterwards (mmengine validates at the last epoch otherwise)
    cfg.val_dataloader = cfg.val_cfg = cfg.val_evaluator = None
    work_dir = osp.join(
        cache_dir, f'{row.task}_{_slug(row.name)}_seed{seed}_'
        f'{config_key(cfg, seed)}')
    final = osp.join(work_dir, 'final.pth')
    if osp.isfile(final):
        return final
    return _train(cfg, work_dir, seed, keep_every) if train else None


def training_free_checkpoint(repo, row, finetuned, out, backbone=None,
                             options=None):
    """A dense row's fine-tuned model in ``row``'s architecture, untrained:
    the backbone read from ``backbone`` (default ``finetuned`` itself) by
    the row's backbone loader, exactly as a pretrained checkpoint is read
    (its load report is kept in the checkpoint's ``meta``), and every other
    tensor (neck, heads) from ``finetuned`` unchanged.

    Raises:
        ValueError: the non-backbone tensors of ``finetuned`` are not
            exactly the model's (another task's or recipe's checkpoint).

    Returns:
        str: ``out`` (reused when it exists).
    """
    from ...apis.harness import build_model
    from ...models.utils.checkpoint import read_state_dict
    if osp.isfile(out):
        return out
    cfg = _row_config(repo, row, backbone or finetuned, options)
    model = build_model(cfg)
    model.backbone.init_weights()
    state = read_state_dict(finetuned)
    rest = {k: v for k, v in state.items() if not k.startswith('backbone.')}
    own = {k for k in model.state_dict() if not k.startswith('backbone.')}
    if set(rest) != own:
        raise ValueError(
            f'{finetuned} does not fit {row.config} outside the backbone: '
            f'missing {sorted(own - set(rest))[:5]}, unexpected '
            f'{sorted(set(rest) - own)[:5]}')
    model.load_state_dict(rest, strict=False)
    report = getattr(model.backbone, 'load_report', None)
    os.makedirs(osp.dirname(osp.abspath(out)), exist_ok=True)
    tmp = out + '.tmp'
    torch.save(dict(state_dict=model.state_dict(),
                    meta=dict(source=finetuned, backbone=backbone or finetuned,
                              load_report=str(report))), tmp)
    os.replace(tmp, out)
    return out


def _test_cache(repo, row, checkpoint, options=None):
    """The row's test config and the JSON that caches ``checkpoint``'s
    metrics under it."""
    from ...apis.harness import load_config
    cfg = load_config(osp.join(repo, row.config), options)
    return cfg, osp.splitext(checkpoint)[0] + \
        f'_test_{config_key(cfg, 0)}.json'


def test_metrics(repo, row, checkpoint, options=None, work_dir=None):
    """The row's test-split metrics of ``checkpoint`` from the toolbox's
    test loop (``Runner.test``), cached as JSON beside the checkpoint.

    Args:
        repo (str): the repository root.
        row (DenseRow): the row (its config).
        checkpoint (str): a whole-model checkpoint.
        options (dict, optional): more cfg options.
        work_dir (str, optional): the runner's folder (default:
            ``test/<checkpoint's stem>`` beside the checkpoint).

    Returns:
        dict: the evaluator's metrics.
    """
    from mmengine.runner import Runner
    cfg, cache = _test_cache(repo, row, checkpoint, options)
    if osp.isfile(cache):
        with open(cache) as f:
            return json.load(f)
    cfg = copy.deepcopy(cfg)
    cfg.model.backbone.init_cfg = None
    cfg.load_from = checkpoint
    # one folder per checkpoint: tests of one run's weights may run at once
    cfg.work_dir = work_dir or osp.join(
        osp.dirname(checkpoint), 'test',
        osp.splitext(osp.basename(checkpoint))[0])
    metrics = Runner.from_cfg(cfg).test()
    metrics = {k: float(v) for k, v in metrics.items()
               if isinstance(v, numbers.Real)}
    with open(cache, 'w') as f:
        json.dump(metrics, f)
    return metrics


def learning_curve(repo, row, checkpoint, options=None):
    """Test metrics of the weights a fine-tuning kept on its way
    (``epoch_{n}.pth`` beside ``checkpoint``, :func:`finetuned_checkpoint`'s
    ``keep_every``), and of ``checkpoint`` itself at its last epoch.

    Returns:
        list[tuple[int, dict]]: ``(epoch, metrics)`` by epoch; only the
        last epoch when the run kept nothing (runs cached before).
    """
    return [(epoch, test_metrics(repo, row, path, options))
            for epoch, path in sorted(kept_checkpoints(checkpoint).items())]


def kept_checkpoints(checkpoint):
    """``{epoch: path}`` of the weights a fine-tuning kept on its way
    (``epoch_{n}.pth`` beside ``checkpoint``) and of ``checkpoint`` itself
    at its last epoch."""
    folder = osp.dirname(checkpoint)
    kept = {}
    for name in os.listdir(folder):
        stem, ext = osp.splitext(name)
        if ext == '.pth' and stem.startswith('epoch_') and \
                stem[6:].isdigit():
            kept[int(stem[6:])] = osp.join(folder, name)
    last = torch.load(checkpoint, map_location='cpu', weights_only=True)
    kept[int(last['meta']['epoch'])] = checkpoint
    return kept


def _summarise(row, setting, metrics, per_seed):
    from .dense_report import METRIC_COLUMNS
    from .evaluation import summarise
    out = dict(task=row.task, method=row.name, setting=setting,
               reference=row.reference, paper=row.paper,
               num_seeds=len(per_seed))
    for key in metrics:
        column, scale = METRIC_COLUMNS[key]
        out[column], out[column + '_std'] = summarise(
            scale * m[key] for m in per_seed)
    return out


def task_rows(repo, task, metrics, rows, hosts, seeds, cache_dir,
              options=None, progress=None, workers=1, keep_every=None,
              dgssa_images=DGSSA_IMAGES):
    """Train (or reuse) and test every row of a task over ``seeds``, and
    the training-free conversions of the dense reference's fine-tuned
    weights.

    Args:
        repo (str): the repository root.
        task (str): the task's name.
        metrics (tuple[str]): the evaluator keys to report.
        rows (list[DenseRow]): the task's rows.
        hosts (dict[str, str]): :data:`DENSE_HOSTS` name -> checkpoint.
        seeds (list[int]): training seeds.
        cache_dir (str): the cache folder.
        options (dict, optional): cfg options of every row (reduced runs).
        progress (Callable[[str], None], optional): called per step.
        workers (int): training runs, DGSSA initialisations and tests at
            once (:func:`~.training.parallel_map`); cached ones cost
            nothing.
        keep_every (int, optional): runs trained now keep their weights
            every so many epochs (:func:`learning_curve`).
        dgssa_images (int): training scenes of ``tools/dgssa_init.py``
            (:func:`dgssa_init_checkpoint`).

    Returns:
        tuple[list[dict], dict]: the CSV rows (with ``reference``; the
        costs are added by :func:`~.dense_report.measure_dense`) and
        ``{(method, setting): checkpoint of the first seed}``.
    """
    out, first, finetuned = [], {}, {}
    calls = []
    # the configs name the default's file; other counts get their own
    dgssa = '_dgssa' + ('' if dgssa_images == DGSSA_IMAGES else
                        str(dgssa_images)) + '.pth'
    for row in rows:
        start = hosts[row.host]
        if row.host_layout == 'official':
            start = official_host_checkpoint(
                start, osp.join(cache_dir, f'digits_{row.host}_host_'
                                'official.pth'))
        if row.dgssa_init:
            # one file per host: both tasks draw the same training scenes;
            # for the Swin host it is the path the DGSSA configs name
            start = dgssa_init_checkpoint(
                repo, osp.join(repo, row.config), start,
                osp.join(cache_dir, f'digits_{row.host}_host{dgssa}'),
                dgssa_images)
        calls += [(repo, row, start, s, cache_dir, options) for s in seeds]
    parallel_map(finetuned_checkpoint, [
        c + (True, keep_every) for c in calls
        if finetuned_checkpoint(*c, train=False) is None
    ], workers)
    trained = iter(finetuned_checkpoint(*c, train=False) for c in calls)
    for row in rows:
        finetuned[row.name] = [next(trained) for _ in seeds]
    # the training-free conversions: DGSSA's initialisation of each
    # fine-tuned reference (in the pool), then the weights put together
    converted, inits = {}, []
    for row in rows:
        if not row.training_free:
            continue
        for source in finetuned[row.reference]:
            stem = osp.splitext(source)[0] + f'_as_{_slug(row.name)}'
            backbone = None
            if row.dgssa_init:
                backbone = stem + dgssa
                inits.append((repo, osp.join(repo, row.config), source,
                              backbone, dgssa_images))
            converted.setdefault(row.name, []).append(
                (source, stem + '.pth', backbone))
    parallel_map(dgssa_init_checkpoint,
                 [c for c in inits if not osp.isfile(c[3])], workers)
    for row in rows:
        converted[row.name] = [
            training_free_checkpoint(repo, row, source, out, backbone, options)
            for source, out, backbone in converted.get(row.name, [])
        ]
    # every test in the pool (cached as JSON): the fine-tuned seeds, the
    # conversions, and the weights the first seed kept (learning_curve)
    tests = [(repo, row, c, options) for row in rows
             for c in finetuned[row.name] + converted[row.name]]
    tests += [(repo, row, c, options) for row in rows
              for c in kept_checkpoints(finetuned[row.name][0]).values()
              if c != finetuned[row.name][0]]
    parallel_map(test_metrics, [
        t for t in tests if not osp.isfile(_test_cache(*t)[1])
    ], workers)
    for row in rows:
        per_seed = [test_metrics(repo, row, c, options)
                    for c in finetuned[row.name]]
        out.append(_summarise(row, 'fine-tuned', metrics, per_seed))
        first[(row.name, 'fine-tuned')] = finetuned[row.name][0]
        if progress:
            progress(f'{task} {row.name}')
    for row in rows:
        if not row.training_free:
            continue
        per_seed = [test_metrics(repo, row, c, options)
                    for c in converted[row.name]]
        out.append(_summarise(row, 'training-free', metrics, per_seed))
        first[(row.name, 'training-free')] = converted[row.name][0]
        if progress:
            progress(f'{task} {row.name} training-free')
    return out, first
