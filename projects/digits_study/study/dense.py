"""The dense evidence (``docs/study.md``, "Dense prediction"): detection and
segmentation on :class:`~projects.digits_study.datasets.DigitsInstances` /
:class:`~projects.digits_study.datasets.DigitsSegmentation` scenes, every row
fine-tuned from a pretrained classifier (the digits Swin host), as a user
fine-tunes from an ImageNet checkpoint.

The rows are the entries of :data:`DENSE_METHODS_FILE`, read by
:func:`load_dense_tasks` into :class:`DenseRow`; a method row's config is
the switch's conversion of its dense reference's (:func:`row_config`,
``accelerate_config``), so that the study measures the model a user gets
from ``tools/accelerate.py``. :func:`finetuned_checkpoint`
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

import torch

from projects.digits_study.study.dense_rows import (DENSE_HOSTS,
                                                    DENSE_METHODS_FILE,
                                                    HOST_LAYOUTS, HOST_OPTION,
                                                    SWIN_HOST_CONFIG, DenseRow,
                                                    load_dense_tasks,
                                                    row_config,
                                                    row_config_file)
from projects.digits_study.study.training import (_run_tool_atomic, _slug,
                                                  _train, config_key,
                                                  parallel_map)

__all__ = [
    'DENSE_METHODS_FILE', 'DENSE_HOSTS', 'DGSSA_IMAGES', 'DenseRow',
    'HOST_LAYOUTS', 'HOST_OPTION', 'official_host_checkpoint',
    'SWIN_HOST_CONFIG', 'dgssa_init_checkpoint', 'finetuned_checkpoint',
    'kept_checkpoints', 'learning_curve', 'load_dense_tasks', 'row_config',
    'row_config_file', 'task_rows', 'test_metrics',
    'training_free_checkpoint'
]


def _row_config(repo, row, backbone_checkpoint, options=None):
    return row_config(repo, row, {row.host_option: backbone_checkpoint,
                                  **(options or {})})


def official_host_checkpoint(checkpoint, out):
    """A Swin host written in the official Swin layout (``{'model':
    state_dict}``, :func:`~projects.digits_study.swin_layout.
    swin_to_official`), as upstream Video Swin's ``inflate_weights`` reads
    an ImageNet Swin; written anew on every call (a few MB), so that it is
    never a stale host's.

    Returns:
        str: ``out``.
    """
    from projects.digits_study.swin_layout import swin_to_official
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
    from mmvitaccel.apis.harness import build_model
    from mmvitaccel.models.utils.checkpoint import read_state_dict
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
            f'{finetuned} does not fit {row.name}\'s model outside the '
            f'backbone ({row.config}, method {row.method}): '
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
    cfg = row_config(repo, row, options)
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
    # the study's own runner checkpoint (its message hub needs the allow-list
    # of mmvitaccel.compat, which torch < 2.6 cannot take)
    last = torch.load(checkpoint, map_location='cpu', weights_only=False)
    kept[int(last['meta']['epoch'])] = checkpoint
    return kept


def _summarise(row, setting, metrics, per_seed):
    from projects.digits_study.study.dense_report import METRIC_COLUMNS
    from projects.digits_study.study.evaluation import summarise
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
    # the switch's configs of the method rows, for tools/dgssa_init.py
    configs = osp.join(cache_dir, 'configs')
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
                repo, row_config_file(repo, row, configs), start,
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
                inits.append((repo, row_config_file(repo, row, configs),
                              source, backbone, dgssa_images))
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
