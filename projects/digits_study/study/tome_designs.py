"""The choice between ToMe's two Swin designs (``docs/tome.md#swin``): each
design at several settings, training-free, on the dense evidence's
fine-tuned Swin detector and segmentor (``tools/analysis/dense_study.py``
trains them), against backbone FLOPs by the one counter.

``tools/analysis/tome_swin_designs.py`` is the command.
"""
import dataclasses
import os.path as osp

from projects.digits_study.study.training import _slug, parallel_map

__all__ = ['DESIGN_SETTINGS', 'DESIGN_FIELDS', 'tome_row', 'design_rows',
           'peer_checkpoints', 'write_design_csv', 'read_design_csv',
           'design_markdown_table', 'plot_designs']

#: ``(design, setting label, ToMeSwinTransformer options)``: the window
#: design in stage 3 alone and in every stage (its default, r=16), the stage
#: design in stage 3 (the stage whose blocks hold most of Swin's FLOPs;
#: earlier stages' maps make its masked attention over the merged map cost
#: more than the windows save)
DESIGN_SETTINGS = (
    ('window', 'r=8, stage 3', dict(r=[0, 0, 8, 0])),
    ('window', 'r=16, stage 3', dict(r=[0, 0, 16, 0])),
    ('window', 'r=24, stage 3', dict(r=[0, 0, 24, 0])),
    ('window', 'r=16, every stage', dict(r=16)),
    ('window', 'r=24, every stage', dict(r=24)),
    ('stage', 'ratio 0.2, stage 3',
     dict(design='stage', stage_ratio=[0, 0, 0.2, 0])),
    ('stage', 'ratio 0.35, stage 3',
     dict(design='stage', stage_ratio=[0, 0, 0.35, 0])),
    ('stage', 'ratio 0.5, stage 3',
     dict(design='stage', stage_ratio=[0, 0, 0.5, 0])),
)

#: the CSV's columns: metrics in percent (mean and std over the seeds),
#: ``change`` against the fine-tuned reference in points
DESIGN_FIELDS = ('task', 'design', 'setting', 'metric', 'value', 'std',
                 'change', 'backbone_gflops', 'flops_ratio', 'seeds')


def tome_row(reference):
    """The switch's ToMe row of a dense reference row (its config
    converted, training-free)."""
    return dataclasses.replace(reference, name='ToMe', method='tome',
                               reference=reference.name, training_free=True)


def _options(options):
    return {f'model.backbone.{k}': v for k, v in options.items()}


def peer_checkpoints(repo, peer, finetuned, cache_dir, workers=1,
                     options=None, dgssa_images=None):
    """The dense study's training-free conversion of each fine-tuned
    reference into a peer row (STViT-R, DGSSA-Swin), at the paths where
    ``tools/analysis/dense_study.py`` caches them (reused when there).

    Args:
        repo (str): the repository root.
        peer (DenseRow): a ``training_free`` row of the methods file.
        finetuned (list[str]): the reference's checkpoints, one a seed.
        cache_dir (str): the dense study's cache (its ``configs/`` holds
            the switch's configs for ``tools/dgssa_init.py``).
        workers (int): DGSSA initialisations at once.
        options (dict, optional): cfg options of every run.
        dgssa_images (int, optional): scenes of ``tools/dgssa_init.py``
            (default ``dense.DGSSA_IMAGES``).

    Returns:
        list[str]: one converted checkpoint a seed.
    """
    from projects.digits_study.study import dense
    from projects.digits_study.study.dense_rows import row_config_file
    images = dgssa_images or dense.DGSSA_IMAGES
    suffix = '_dgssa' + ('' if images == dense.DGSSA_IMAGES else
                         str(images)) + '.pth'
    stems = [osp.splitext(s)[0] + f'_as_{_slug(peer.name)}'
             for s in finetuned]
    backbones = [None] * len(stems)
    if peer.dgssa_init:
        config = row_config_file(repo, peer, osp.join(cache_dir, 'configs'))
        backbones = [stem + suffix for stem in stems]
        parallel_map(dense.dgssa_init_checkpoint, [
            (repo, config, source, out, images)
            for source, out in zip(finetuned, backbones)
            if not osp.isfile(out)
        ], workers)
    return [dense.training_free_checkpoint(repo, peer, source, stem + '.pth',
                                           backbone, options)
            for source, stem, backbone in zip(finetuned, stems, backbones)]


def design_rows(repo, reference, finetuned, metric, settings=DESIGN_SETTINGS,
                workers=1, options=None, peers=()):
    """Every design setting on the reference's fine-tuned weights, and
    the peers' training-free rows on the same weights.

    Args:
        repo (str): the repository root.
        reference (DenseRow): the dense Swin row.
        finetuned (list[str]): its fine-tuned checkpoints, one a seed.
        metric (str): the evaluator key reported (e.g. ``'coco/bbox_mAP'``).
        settings (Sequence[tuple]): see :data:`DESIGN_SETTINGS`.
        workers (int): tests at once (:func:`~.training.parallel_map`).
        options (dict, optional): cfg options of every run (reduced runs).
        peers (Sequence[tuple[DenseRow, list[str]]]): other training-free
            rows and their converted checkpoints
            (:func:`peer_checkpoints`); their ``design`` is the row's name.

    Returns:
        list[dict]: :data:`DESIGN_FIELDS` rows, the reference first.
    """
    import statistics

    import torch

    from mmvitaccel.analysis.flops import count_flops
    from mmvitaccel.apis.harness import build_model
    from projects.digits_study.study import dense
    from projects.digits_study.study.dense_report import (METRIC_COLUMNS,
                                                          dense_inputs)
    row = tome_row(reference)
    options = dict(options or {})
    runs = [(reference, '', 'dense', options, list(finetuned))]
    for design, label, backbone in settings:
        opts = {**options, **_options(backbone)}
        converted = [dense.training_free_checkpoint(
            repo, row, source, osp.splitext(source)[0] +
            f'_as_tome_{_slug(label)}.pth', options=opts)
            for source in finetuned]
        runs.append((row, design, label, opts, converted))
    for peer, converted in peers:
        runs.append((peer, peer.name, 'training-free', options,
                     list(converted)))
    tests = [(repo, r, c, o or None) for r, _, _, o, cs in runs for c in cs]
    parallel_map(dense.test_metrics, [
        t for t in tests if not osp.isfile(dense._test_cache(*t)[1])
    ], workers)
    test_set = None
    out = []
    for r, design, label, opts, checkpoints in runs:
        # in percent (mmseg's mIoU is already)
        scale = 100 * METRIC_COLUMNS[metric][1]
        values = [scale * dense.test_metrics(repo, r, c, opts or None)[metric]
                  for c in checkpoints]
        cfg = dense.row_config(repo, r, opts or None)
        cfg.model.backbone.init_cfg = None
        model = build_model(cfg, checkpoints[0])
        if test_set is None:
            from mmengine.registry import DATASETS, DefaultScope
            with DefaultScope.overwrite_default_scope(cfg.default_scope):
                test_set = DATASETS.build(cfg.test_dataloader.dataset)
        images, _ = dense_inputs(model, test_set, 1)
        with torch.no_grad():
            gflops = count_flops(model.backbone, images).total / 1e9
        out.append(dict(
            task=reference.task, design=design or 'host', setting=label,
            metric=metric.split('/')[-1], value=statistics.mean(values),
            std=statistics.stdev(values) if len(values) > 1 else 0.,
            backbone_gflops=gflops, seeds=len(values)))
    for r in out:
        r['change'] = r['value'] - out[0]['value']
        r['flops_ratio'] = r['backbone_gflops'] / out[0]['backbone_gflops']
    return out


def write_design_csv(rows, path):
    """:data:`DESIGN_FIELDS` rows as CSV."""
    from projects.digits_study.study.dense_report import _write_csv
    _write_csv(rows, path, DESIGN_FIELDS)


def read_design_csv(path):
    """The rows :func:`write_design_csv` wrote (numbers as floats)."""
    import csv
    with open(path, newline='') as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        for key in ('value', 'std', 'change', 'backbone_gflops',
                    'flops_ratio'):
            row[key] = float(row[key])
        row['seeds'] = int(row['seeds'])
    return rows


def _points(value):
    """``value`` to one decimal, half to even on its CSV digits."""
    from decimal import ROUND_HALF_EVEN, Decimal
    out = Decimal(f'{value:.6f}').quantize(Decimal('0.1'), ROUND_HALF_EVEN)
    return f'{out:+}'.replace('-', '−')


def design_markdown_table(rows):
    """One Markdown table, a row per design setting or peer: the backbone
    FLOPs ratio (of the detector's) and the change of each task's metric
    (points, ± the std over seeds of the row's value)."""
    tasks = list(dict.fromkeys(r['task'] for r in rows))
    metrics = {r['task']: r['metric'] for r in rows}
    lines = ['| design | setting | backbone FLOPs ratio | ' + ' | '.join(
        f'{metrics[t]} change' for t in tasks) + ' |',
        '|' + ' --- |' * (3 + len(tasks))]
    keys = list(dict.fromkeys((r['design'], r['setting']) for r in rows
                              if r['design'] != 'host'))
    for design, setting in keys:
        cells = {r['task']: r for r in rows
                 if (r['design'], r['setting']) == (design, setting)}
        name = f'ToMe, {design} design' if design in ('window', 'stage') \
            else design
        lines.append(
            f'| {name} | {setting} | '
            f'{cells[tasks[0]]["flops_ratio"]:.2f} | ' + ' | '.join(
                f'{_points(cells[t]["change"])} ± {cells[t]["std"]:.1f}'
                for t in tasks) + ' |')
    return '\n'.join(lines)


def plot_designs(rows, path):
    """Change against the dense model vs the backbone FLOPs ratio, one
    panel a task, one line a design."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    tasks = list(dict.fromkeys(r['task'] for r in rows))
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 4),
                             squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for design, marker in (('window', 'o'), ('stage', 's')):
            pts = sorted((r['flops_ratio'], r['change'], r['setting'])
                         for r in rows if r['task'] == task
                         and r['design'] == design)
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker,
                    label=f'{design} design')
        metric = next(r['metric'] for r in rows if r['task'] == task)
        for r in rows:
            if r['task'] == task and r['design'] not in ('host', 'window',
                                                         'stage'):
                ax.plot(r['flops_ratio'], r['change'], marker='^',
                        ls='none', label=f'{r["design"]} training-free')
        ax.axhline(0, color='grey', lw=0.8)
        ax.set_xlabel('backbone FLOPs ratio to the dense Swin')
        ax.set_ylabel(f'{metric} change (points)')
        ax.set_title(f'{task}: training-free')
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
