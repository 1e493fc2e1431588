"""The training-free table (``docs/accelerate.md``): what running a host's
weights unchanged in a method costs, for the models a user gets from the
switch (:func:`~mmvitaccel.switch.accelerate_config`).

* On the digits DeiT host (the classification study's): :func:`deit_rows`
  converts the host config for each training-free method and setting of
  :data:`SETTINGS` (``tis`` and ``cls``, with SaiT's value and mass
  selectors) and ToMe at the value selector's FLOPs
  (:func:`tome_settings`), loads the host's weights as they are, and measures the top-1
  on the test split, FLOPs per image (the test-split mean where the kept
  tokens depend on the image) and the speed ratio to the host, timed
  interleaved at batch 1 and 32.
* On the dense Swin host: :func:`dense_rows` takes the training-free rows
  of the dense evidence (``tools/analysis/dense_study.py``: the fine-tuned
  dense detector's and segmentor's weights in STViT-R and DGSSA-Swin,
  models tested equal to the switch's conversions), with their change
  against the dense model and the whole model's speed ratio at batch 1
  and 8.

``tools/analysis/training_free.py`` is the command.
"""
import csv

from projects.digits_study.study.evaluation import (build_study_model, measure,
                                                    top1)

__all__ = ['SETTINGS', 'FIELDS', 'tome_settings', 'deit_rows', 'dense_rows',
           'write_rows', 'read_rows', 'markdown_table', 'plot_training_free',
           'read_design_rows']

#: ``(method, setting label, accelerate_config options)`` on the DeiT host:
#: SaiT's value selector at three densities, its mass selector at two
#: shares of the score mass, and the value selector with its dropped
#: tokens merged into the kept ones (prune and merge)
SETTINGS = tuple(
    (method, label, options) for method in ('tis', 'cls')
    for label, options in (
        ('value, density 0.7', dict(selector='value', density=0.7)),
        ('value, density 0.5', dict(selector='value', density=0.5)),
        ('value, density 0.3', dict(selector='value', density=0.3)),
        ('mass 0.9', dict(selector='mass', mass_threshold=0.9)),
        ('mass 0.7', dict(selector='mass', mass_threshold=0.7)),
    )) + tuple(
        (method, f'value, density {d}, merged', dict(
            selector='value', density=d, merge_pruned=True))
        for method in ('tis', 'cls') for d in (0.7, 0.5, 0.3))

def tome_settings(cfg, densities=(0.7, 0.5, 0.3)):
    """ToMe beside the value selector: for each density, the smallest
    constant ``r`` whose layers cost no more than the pruned host's
    (pruning before the switch's layer, ``K`` tokens kept after it).

    Args:
        cfg (mmengine.Config): the host config (an mmpretrain ViT).
        densities (Sequence[float]): the value selector's densities.

    Returns:
        tuple[tuple]: ``('tome', label, options)`` a density, as
        :data:`SETTINGS`.
    """
    from mmengine.registry import MODELS, DefaultScope

    from mmvitaccel.ops import value_keep_count, vit_layer_flops
    from mmvitaccel.ops.tome import tome_r_for_flops
    from mmvitaccel.switch.vit_placement import scaled_layers
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        vit = MODELS.build(cfg.model.backbone)
    N = vit.patch_resolution[0] * vit.patch_resolution[1]
    L, C = vit.num_layers, vit.embed_dims
    F, h = (vit.arch_settings[k] for k in ('feedforward_channels',
                                            'num_heads'))
    E = vit.num_extra_tokens
    before = scaled_layers((3, ), L)[0]
    out = []
    for density in densities:
        kept = E + value_keep_count(N, density)
        pruned = sum(vit_layer_flops(N + E if i < before else kept, C, F)
                     for i in range(L))
        ratio = pruned / (L * vit_layer_flops(N + E, C, F))
        r = tome_r_for_flops(ratio, N + E, L, C, F, h, E)
        out.append(('tome', f'r={r} (FLOPs of density {density})',
                    dict(r=r)))
    return tuple(out)


#: the CSV's columns: ``value`` and ``change`` in points (percent), two
#: metrics joined by ``' / '`` (bbox / mask AP); speed ratios to the host
#: at batch 1 and ``batch_n``
FIELDS = ('host', 'task', 'method', 'setting', 'metric', 'value', 'change',
          'flops_ratio', 'speed_b1', 'speed_bn', 'batch_n')


def deit_rows(cfg, checkpoint, inputs, settings=SETTINGS, rounds=10,
              batch_size=32, other_canvases=None):
    """The training-free methods on a classification host.

    Args:
        cfg (mmengine.Config): the host config.
        checkpoint (str): the host's weights (loaded unchanged).
        inputs (list): test batches (:func:`~.evaluation.test_inputs`),
            also timed.
        settings (Sequence[tuple]): see :data:`SETTINGS`.
        rounds (int): interleaved timing rounds.
        batch_size (int): the larger timed batch.
        other_canvases (dict[int, list], optional): ``{canvas seed: test
            batches}`` of the same test scans on other canvases: each
            row's top-1 on them follows, joined by ``' / '``.

    Returns:
        list[dict]: :data:`FIELDS` rows, the host first.
    """
    from mmvitaccel.switch.accelerate import accelerate_config
    if settings is SETTINGS:
        settings = SETTINGS + tome_settings(cfg)
    rows = [dict(method='host', setting='dense',
                 build=lambda: build_study_model(cfg, checkpoint))]
    for method, label, options in settings:
        converted = accelerate_config(cfg, method, **options)
        rows.append(dict(method=method, setting=label,
                         build=lambda c=converted: build_study_model(
                             c, checkpoint)))
    canvases = [inputs] + list((other_canvases or {}).values())
    for row in rows:
        model = row['build']()
        row['top1s'] = [100 * top1(model, batches) for batches in canvases]
        row['top1'] = row['top1s'][0]
    measure(rows, inputs, rounds=rounds, batch_size=batch_size)
    b1 = [dict(row) for row in rows]
    measure(b1, [(x[:1], y[:1]) for x, y in inputs[:1]], rounds=rounds,
            batch_size=1, iters_per_round=20)
    metric = 'top-1'
    if other_canvases:
        first = cfg.test_dataloader.dataset.get('canvas_seed', 0)
        metric += ', canvas seed ' + ' / '.join(
            str(seed) for seed in [first, *other_canvases])
    host = rows[0]['top1s']
    out = []
    for row, single in zip(rows, b1):
        out.append(dict(
            host=f'digits DeiT ({rows[0]["top1"]:.1f}% top-1)',
            task='classification', method=row['method'],
            setting=row['setting'], metric=metric,
            value=' / '.join(f'{v:.1f}' for v in row['top1s']),
            change=' / '.join(_points(v - h)
                              for v, h in zip(row['top1s'], host)),
            flops_ratio=row['flops_ratio'], speed_b1=single['speed_ratio'],
            speed_bn=row['speed_ratio'], batch_n=batch_size))
    return out


def dense_rows(dense):
    """The training-free rows of the dense evidence.

    Args:
        dense (list[dict]): rows of ``dense.csv``
            (:func:`~.dense_report.read_dense_csv`; metrics as shares).

    Returns:
        list[dict]: :data:`FIELDS` rows, each training-free row after its
        dense reference.
    """
    metrics = dict(detection=('bbox_ap', 'segm_ap'), segmentation=('miou', ))
    names = dict(bbox_ap='bbox AP', segm_ap='mask AP', miou='mIoU')
    out = []
    for ref in dense:
        if ref['setting'] != 'fine-tuned' or ref['reference'] or \
                ref['task'] not in metrics:
            continue
        keys = [k for k in metrics[ref['task']] if ref.get(k) is not None]
        free = [r for r in dense if r['setting'] == 'training-free'
                and r['reference'] == ref['method'] and r['task'] ==
                ref['task']]
        if not free:
            continue
        for row in [ref] + free:
            same = row is ref
            out.append(dict(
                host=f'digits {ref["method"]}, fine-tuned for {ref["task"]}',
                task=ref['task'],
                method='host' if same else row['method'],
                setting='dense' if same else 'training-free',
                metric=' / '.join(names[k] for k in keys),
                value=' / '.join(f'{100 * row[k]:.1f}' for k in keys),
                change=' / '.join(_points(100 * (row[k] - ref[k]))
                                  for k in keys),
                flops_ratio=row['flops_ratio'],
                speed_b1=row['model_speed_b1'],
                speed_bn=row['model_speed_b8'], batch_n=8))
    return out


def _points(delta):
    return f'{delta:+.1f}'.replace('-', '−')


def write_rows(rows, path):
    """:data:`FIELDS` rows as CSV."""
    with open(path, 'w', newline='') as f:
        writer = csv.DictWriter(f, FIELDS, extrasaction='ignore')
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f'{v:.4f}' if isinstance(v, float) else v)
                             for k, v in row.items() if k in FIELDS})


def read_rows(path):
    """The rows :func:`write_rows` wrote."""
    with open(path, newline='') as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        for key in ('flops_ratio', 'speed_b1', 'speed_bn'):
            row[key] = float(row[key])
        row['batch_n'] = int(row['batch_n'])
    return rows


def markdown_table(rows):
    """One Markdown table of the rows (change in points against the
    host)."""
    lines = ['| host | method | setting | metric | value | change | '
             'FLOPs ratio | speed b1 / b32 (b8 dense) |',
             '|' + ' --- |' * 8]
    for r in rows:
        lines.append(
            f'| {r["host"]} | {r["method"]} | {r["setting"]} | '
            f'{r["metric"]} | {r["value"]} | '
            f'{"—" if r["method"] == "host" else r["change"]} | '
            f'{r["flops_ratio"]:.2f} | {r["speed_b1"]:.2f} / '
            f'{r["speed_bn"]:.2f} |')
    return '\n'.join(lines)


def _mean_change(change):
    """``'+0.3 / −0.6'`` (a value a canvas seed) -> (mean, low, high)."""
    values = [float(v.replace('−', '-')) for v in change.split(' / ')]
    return sum(values) / len(values), min(values), max(values)


def _series(row):
    """The plot series of a classification row."""
    kind = 'mass' if row['setting'].startswith('mass') else \
        'merged' if 'merged' in row['setting'] else ''
    return ' '.join(p for p in (row['method'], kind) if p)


def plot_training_free(rows, design_rows, path):
    """Accuracy change against FLOPs ratio of every training-free method:
    the classification rows on the digits DeiT host (mean of the canvas
    seeds, their range as a bar), and the dense rows of
    ``tools/analysis/tome_swin_designs.py`` (ToMe's designs, STViT-R and
    DGSSA-Swin on the same fine-tuned Swins), one panel a task.

    Args:
        rows (list[dict]): :func:`read_rows` rows.
        design_rows (list[dict]): rows of ``tome_swin_designs.csv`` (may
            be empty).
        path (str): the PNG written.
    """
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    tasks = list(dict.fromkeys(r['task'] for r in design_rows))
    fig, axes = plt.subplots(1, 1 + len(tasks),
                             figsize=(5.5 * (1 + len(tasks)), 4.5),
                             squeeze=False)
    ax = axes[0][0]
    cls_rows = [r for r in rows if r['task'] == 'classification'
                and r['method'] != 'host']
    for name in dict.fromkeys(_series(r) for r in cls_rows):
        pts = sorted((r['flops_ratio'], *_mean_change(r['change']))
                     for r in cls_rows if _series(r) == name)
        xs = [p[0] for p in pts]
        ys = [p[1] for p in pts]
        err = [[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]]
        ax.errorbar(xs, ys, yerr=err, marker='o', capsize=2, label=name)
    host = next((r['host'] for r in rows if r['task'] == 'classification'),
                'digits DeiT')
    ax.set_title(f'classification, {host}')
    ax.set_ylabel('top-1 change (points)')
    for ax, task in zip(axes[0][1:], tasks):
        here = [r for r in design_rows if r['task'] == task]
        for design in dict.fromkeys(r['design'] for r in here):
            if design == 'host':
                continue
            pts = sorted((float(r['flops_ratio']), float(r['change']),
                          float(r['std'])) for r in here
                         if r['design'] == design)
            label = f'ToMe, {design} design' if design in (
                'window', 'stage') else design
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts],
                        yerr=[p[2] for p in pts], capsize=2,
                        marker='o' if len(pts) > 1 else '^',
                        ls='-' if len(pts) > 1 else 'none', label=label)
        metric = here[0]['metric']
        ax.set_title(f'{task}, digits Swin fine-tuned '
                     f'({here[0]["seeds"]} seeds)')
        ax.set_ylabel(f'{metric} change (points; bar: std over seeds)')
    for ax in axes[0]:
        ax.axhline(0, color='grey', lw=0.8)
        ax.set_xlabel('FLOPs ratio (classifier; dense: backbone)')
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def read_design_rows(path):
    """The rows of ``tome_swin_designs.csv``.

    Args:
        path (str): the CSV ``tools/analysis/tome_swin_designs.py`` wrote.

    Returns:
        list[dict]: its rows (:func:`~.tome_designs.read_design_csv`), or
        [] without the file.
    """
    import os.path as osp

    from projects.digits_study.study.tome_designs import read_design_csv
    return read_design_csv(path) if osp.isfile(path) else []
