"""The dense evidence's measurements and outputs: backbone FLOPs and the
speed ratios of backbones and whole models (:func:`measure_dense`), the
CSV (:data:`DENSE_FIELDS`), its Markdown table, the plot of each task's
metric against backbone FLOPs, the learning curves (:data:`CURVE_FIELDS`)
and the picture of predicted test scenes."""
import csv
import os
import os.path as osp
import statistics

import torch

__all__ = [
    'CURVE_FIELDS', 'DENSE_FIELDS', 'METRIC_COLUMNS', 'curve_rows',
    'dense_inputs', 'dense_markdown_table', 'measure_dense',
    'merge_task_rows', 'plot_curves', 'plot_dense', 'prediction_picture',
    'read_curves_csv', 'read_dense_csv', 'write_curves_csv', 'write_dense_csv'
]

#: evaluator key -> the CSV's column (its mean; ``_std`` the spread) and
#: the factor to a share (mmseg's IoUMetric reports percent)
METRIC_COLUMNS = {
    'coco/bbox_mAP': ('bbox_ap', 1.),
    'coco/segm_mAP': ('segm_ap', 1.),
    'mIoU': ('miou', 0.01),
    'acc/top1': ('top1', 1.),
}

#: the CSV's columns. ``setting``: ``'fine-tuned'`` or ``'training-free'``
#: (the dense reference's fine-tuned weights in the row's model); metrics on
#: the test split, mean and standard deviation over ``num_seeds``;
#: ``backbone_gflops`` per image (the one counter); speed ratios: images per
#: second against the row's dense reference, timed interleaved, median over
#: rounds, of the backbone alone and of the whole model's prediction, at
#: batch 1 and 8; ``reference``: that dense row's method (empty for a dense
#: row); ``paper``: what the method's paper reports for the task.
DENSE_FIELDS = ('task', 'method', 'setting', 'reference', 'bbox_ap',
                'bbox_ap_std', 'segm_ap', 'segm_ap_std', 'miou', 'miou_std',
                'top1', 'top1_std', 'num_seeds', 'params', 'backbone_gflops', 'flops_ratio',
                'backbone_speed_b1', 'backbone_speed_b8', 'model_speed_b1',
                'model_speed_b8', 'paper')
_TEXT = ('task', 'method', 'setting', 'reference', 'paper')
#: the metric columns, in the table's order, and their plot markers
_METRICS = ('bbox_ap', 'segm_ap', 'miou', 'top1')
_MARKERS = ('o', 's', 'D', 'v')
_HEADS = dict(bbox_ap='bbox AP', segm_ap='mask AP', miou='mIoU', top1='top-1')
_YLABEL = 'test metric (%): o bbox AP, s mask AP, D mIoU, v top-1'

#: the learning curves' columns: a fine-tuning's test metrics (shares) at
#: the epochs whose weights it kept (:func:`~.dense.learning_curve`)
CURVE_FIELDS = ('task', 'method', 'seed', 'epoch', 'bbox_ap', 'segm_ap',
                'miou', 'top1')


def dense_inputs(model, dataset, num_images):
    """The first ``num_images`` test items, preprocessed by ``model``'s
    data preprocessor: ``(inputs, data_samples)``."""
    from mmengine.dataset import pseudo_collate
    batch = pseudo_collate([dataset[i] for i in range(num_images)])
    with torch.no_grad():
        data = model.data_preprocessor(batch, False)
    return data['inputs'], data['data_samples']


def measure_dense(rows, build, inputs, rounds=5, batch_sizes=(1, 8),
                  progress=False):
    """Add ``params``, ``backbone_gflops``, ``flops_ratio`` and the speed
    ratios (:data:`DENSE_FIELDS`) to the rows of one task, each against its
    ``reference`` row (a row without one is its own: ratio 1).

    Args:
        rows (list[dict]): rows with ``method``, ``setting`` and
            ``reference`` (a dense row's method name, or None).
        build (Callable[[dict], nn.Module]): the row's model, in eval mode.
        inputs (tuple): ``(inputs, data_samples)`` of :func:`dense_inputs`,
            at least ``max(batch_sizes)`` images.
        rounds (int): interleaved timing rounds.
        batch_sizes (tuple[int]): the timed batch sizes.
        progress (bool): progress bars.

    Returns:
        list[dict]: the rows, completed.
    """
    from mmvitaccel.analysis.flops import count_flops, count_params
    from mmvitaccel.analysis.timing import interleaved_benchmark
    images, samples = inputs
    # a recognizer's inputs hold clips per video, (B, clips, C, T, H, W); its
    # backbone reads (B * clips, C, T, H, W) (Recognizer3D.extract_feat)
    clips = images.flatten(0, 1) if images.dim() == 6 else images
    models = {}
    for i, row in enumerate(rows):
        model = build(row)
        models[i] = model
        row['params'] = count_params(model)
        with torch.no_grad():
            row['backbone_gflops'] = count_flops(
                model.backbone, clips[:1]).total / 1e9
    dense = {r['method']: i for i, r in enumerate(rows)
             if r['reference'] is None}
    for i, row in enumerate(rows):
        ref = rows[dense[row['reference'] or row['method']]]
        row['flops_ratio'] = row['backbone_gflops'] / ref['backbone_gflops']

    def backbone_call(model, b):
        def run():
            with torch.no_grad():
                model.backbone(clips[:b])
        return run

    def model_call(model, b):
        def run():
            with torch.no_grad():
                model(images[:b], samples[:b], mode='predict')
        return run

    names = {i: f'{r["method"]} {r["setting"]}' for i, r in enumerate(rows)}
    for part, call in (('backbone', backbone_call), ('model', model_call)):
        for b in batch_sizes:
            result = interleaved_benchmark(
                {names[i]: call(m, b) for i, m in models.items()},
                rounds=rounds, iters_per_round=max(1, 8 // b), warmup=1,
                items_per_call=b, progress=progress)
            for i, row in enumerate(rows):
                ref = names[dense[row['reference'] or row['method']]]
                # the median of the per-round ratios (the study's rule)
                row[f'{part}_speed_b{b}'] = statistics.median(
                    a / r for a, r in zip(result.throughput[names[i]],
                                          result.throughput[ref]))
    return rows


def _write_csv(rows, path, fields):
    """``fields`` of the rows as CSV: floats at 6 significant digits, empty
    where a row has no such value (or None)."""
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    with open(path, 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction='ignore')
        writer.writeheader()
        for row in rows:
            writer.writerow({
                k: f'{row[k]:.6g}' if isinstance(row.get(k), float) else
                row.get(k, '') if row.get(k) is not None else ''
                for k in fields
            })


def write_dense_csv(rows, path):
    """The rows' :data:`DENSE_FIELDS` as CSV (empty where a task has no
    such metric)."""
    _write_csv(rows, path, DENSE_FIELDS)


def _read_csv(path, fields, integers):
    """The rows of a :func:`_write_csv` file, numbers as numbers (None
    where empty, or where a file written before a column existed lacks
    it); ``integers`` as ints, :data:`_TEXT` columns as text."""
    rows = []
    with open(path, newline='') as f:
        for row in csv.DictReader(f):
            for k in fields:
                row.setdefault(k, '')
                if k in _TEXT:
                    row[k] = row[k] or None
                    continue
                row[k] = None if row[k] == '' else (
                    int(row[k]) if k in integers else float(row[k]))
            rows.append(row)
    return rows


def read_dense_csv(path):
    """The rows of a :func:`write_dense_csv` file."""
    return _read_csv(path, DENSE_FIELDS, ('num_seeds', 'params'))


def read_curves_csv(path):
    """The rows of a :func:`write_curves_csv` file."""
    return _read_csv(path, CURVE_FIELDS, ('seed', 'epoch'))


def merge_task_rows(rows, path, reader, tasks):
    """``rows`` (of ``tasks``) after the rows of the other tasks in the
    CSV at ``path`` (none if it does not exist): a run of some of the tasks
    updates theirs and keeps the rest.

    Args:
        rows (list[dict]): the new rows, all of ``tasks``.
        path (str): an earlier CSV of the same kind.
        reader (Callable[[str], list[dict]]): :func:`read_dense_csv` or
            :func:`read_curves_csv`.
        tasks (Iterable[str]): the tasks run now.

    Returns:
        list[dict]: the kept rows, then ``rows``.
    """
    tasks = set(tasks)
    kept = [r for r in reader(path) if r['task'] not in tasks] \
        if osp.isfile(path) else []
    return kept + list(rows)


def _metric(row, col):
    if row.get(col) is None:
        return ''
    std = row.get(col + '_std')
    return (f'{100 * row[col]:.1f} ± {100 * std:.1f}'
            if std is not None and row['num_seeds'] > 1 else
            f'{100 * row[col]:.1f}')


def _change(row, rows):
    """The row's metrics minus its fine-tuned reference's, in points."""
    if row['reference'] is None:
        return '—'
    ref = next(r for r in rows if r['task'] == row['task'] and r[
        'method'] == row['reference'] and r['setting'] == 'fine-tuned')
    return ' / '.join(f'{100 * (row[c] - ref[c]):+.1f}'.replace('-', '−')
                      for c in _METRICS if row.get(c) is not None)


def dense_markdown_table(rows):
    """One Markdown table of the rows (the metric columns some row has, in
    percent, ``mean ± std`` over seeds; the change in points against the row's dense reference;
    the whole model's parameters; backbone GFLOPs with the ratio to the
    reference's)."""
    metrics = [c for c in _METRICS
               if any(r.get(c) is not None for r in rows)]
    head = ('| task | method | setting | '
            + ''.join(f'{_HEADS[c]} | ' for c in metrics) +
            'change | seeds | params (M) | backbone GFLOPs (ratio) | '
            'backbone speed b1 / b8 | model speed b1 / b8 | paper |')
    lines = [head, '|' + ' --- |' * (10 + len(metrics))]
    for r in rows:
        lines.append(
            f'| {r["task"]} | {r["method"]} | {r["setting"]} | '
            + ''.join(f'{_metric(r, c)} | ' for c in metrics) +
            f'{_change(r, rows)} | {r["num_seeds"]} | '
            f'{r["params"] / 1e6:.2f} | '
            f'{r["backbone_gflops"]:.3f} ({r["flops_ratio"]:.2f}) | '
            f'{r["backbone_speed_b1"]:.2f} / {r["backbone_speed_b8"]:.2f} | '
            f'{r["model_speed_b1"]:.2f} / {r["model_speed_b8"]:.2f} | '
            f'{r.get("paper") or "—"} |')
    return '\n'.join(lines)


def curve_rows(task, method, seed, curve):
    """:data:`CURVE_FIELDS` rows of one :func:`~.dense.learning_curve`."""
    rows = []
    for epoch, metrics in curve:
        row = dict(task=task, method=method, seed=seed, epoch=epoch)
        for key, value in metrics.items():
            if key in METRIC_COLUMNS:
                column, scale = METRIC_COLUMNS[key]
                row[column] = scale * value
        rows.append(row)
    return rows


def write_curves_csv(rows, path):
    """The learning curves (:data:`CURVE_FIELDS`) as CSV (empty where a
    task has no such metric)."""
    _write_csv(rows, path, CURVE_FIELDS)


def plot_curves(rows, path):
    """Each task's test metrics against the fine-tuning epoch, one line per
    method and metric, one panel per task."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    tasks = list(dict.fromkeys(r['task'] for r in rows))
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4),
                             squeeze=False)
    for ax, task in zip(axes[0], tasks):
        mine = [r for r in rows if r['task'] == task]
        for method in dict.fromkeys(r['method'] for r in mine):
            for col, marker in zip(_METRICS, _MARKERS):
                points = [(r['epoch'], 100 * r[col]) for r in mine
                          if r['method'] == method and r.get(col) is not None]
                if points:
                    ax.plot(*zip(*points), marker=marker,
                            label=f'{method} ({col})')
        ax.set_title(task)
        ax.set_xlabel('fine-tuning epoch')
        ax.set_ylabel(_YLABEL)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_dense(rows, path):
    """Each task's metrics against backbone GFLOPs (error bars: the
    spread over seeds), one panel per task."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    tasks = list(dict.fromkeys(r['task'] for r in rows))
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4),
                             squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for col, marker in zip(_METRICS, _MARKERS):
            for r in rows:
                if r['task'] != task or r.get(col) is None:
                    continue
                free = r['setting'] == 'training-free'
                ax.errorbar(r['backbone_gflops'], 100 * r[col],
                            yerr=100 * (r.get(col + '_std') or 0),
                            fmt=marker, mfc='none' if free else None,
                            capsize=3)
                ax.annotate(f'{r["method"]}{" (free)" if free else ""}',
                            (r['backbone_gflops'], 100 * r[col]),
                            fontsize=7, xytext=(4, 2),
                            textcoords='offset points')
        ax.set_title(task)
        ax.set_xlabel('backbone GFLOPs per image')
        ax.set_ylabel(_YLABEL)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def prediction_picture(models, dataset, path, num_images=4, score_thr=0.5):
    """The same test scenes predicted by each detector: one row per model
    (``{label: model}``), boxes with digit and score, masks filled.

    Args:
        models (dict[str, nn.Module]): detectors in eval mode.
        dataset: the test dataset (its items packed for the detectors).
        path (str): the PNG to write.
        num_images (int): scenes per row.
        score_thr (float): the lowest score drawn.
    """
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    import numpy as np
    from mmengine.dataset import pseudo_collate
    batch = pseudo_collate([dataset[i] for i in range(num_images)])
    fig, axes = plt.subplots(len(models), num_images,
                             figsize=(2.6 * num_images, 2.8 * len(models)),
                             squeeze=False)
    colours = plt.get_cmap('tab10')
    for r, (label, model) in enumerate(models.items()):
        with torch.no_grad():
            preds = model.test_step(batch)
        for c, pred in enumerate(preds):
            ax = axes[r][c]
            img = batch['inputs'][c].permute(1, 2, 0).numpy()[..., ::-1]
            shown = img.astype(np.float32) / 255
            inst = pred.pred_instances
            keep = inst.scores >= score_thr
            for k in torch.nonzero(keep).flatten().tolist():
                colour = np.array(colours(int(inst.labels[k]))[:3])
                mask = inst.masks[k].numpy().astype(bool)
                shown[mask] = 0.5 * shown[mask] + 0.5 * colour
                x0, y0, x1, y1 = inst.bboxes[k].tolist()
                ax.add_patch(plt.Rectangle((x0, y0), x1 - x0, y1 - y0,
                                           fill=False, color=colour, lw=1))
                ax.text(x0, y0 - 1, f'{int(inst.labels[k])} '
                        f'{float(inst.scores[k]):.2f}', color=colour,
                        fontsize=6)
            ax.imshow(shown)
            ax.set_xticks([])
            ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(label)
    fig.tight_layout()
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
