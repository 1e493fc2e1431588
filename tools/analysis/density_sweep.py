# Copyright (c) mmvitaccel contributors. All rights reserved.
"""Accuracy / FLOPs / speed trade-off of one token-pruned checkpoint.

Evaluates a ``TokenPrunedClassifier`` checkpoint at several pruning
settings (SaiT's density or mass threshold, or AS-ViT's learned thresholds
scaled by a factor) on the first images of the config's test set, after a
dense reference run (no pruning), and writes ``sweep.csv`` and
``sweep.png`` (accuracy against GFLOPs) to ``--out-dir``.

Columns: ``param, value, metric, accuracy, gflops, flops_ratio,
mean_density, images_per_s, throughput_ratio``. FLOPs are per image, by
the project convention: the whole model counted once with
:func:`mmvitaccel.analysis.flops.count_flops` without pruning, minus the
analytical FLOPs that each image's pruning saves (exactly what the counter
gives on the pruned forward; see ``tests/test_token_pruned_vit.py``).
``mean_density`` is the mean kept fraction of patch tokens over the layers
after the first pruning location. Throughputs are measured after the
accuracy pass, on the same batches, with every setting timed in turn within
each round (:func:`mmvitaccel.analysis.timing.interleaved_benchmark`,
median over ``--rounds``), so that machine noise hits all settings alike;
``throughput_ratio`` is the median per-round ratio to the dense run.

Examples::

    python tools/analysis/density_sweep.py configs/sait_deit_s_m07_in1k.py \
        sait.pth --param mass_threshold --values 0.5 0.6 0.7 0.8 0.9 1.0
    python tools/analysis/density_sweep.py configs/asvit_deit_t_in1k.py \
        work_dirs/asvit/epoch_2.pth --param threshold_scale \
        --values 0.5 1 2 --tiny --num-images 8
"""
import argparse
import csv
import os
import os.path as osp
import sys

import torch
from mmengine.config import DictAction
from tqdm import tqdm

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, REPO)

import mmvitaccel  # noqa: E402
from mmvitaccel.analysis.flops import count_flops  # noqa: E402
from mmvitaccel.analysis.timing import interleaved_benchmark  # noqa: E402
from mmvitaccel.apis.harness import (  # noqa: E402
    build_model, load_config, real_data_batches)

mmvitaccel.compat.apply()  # our tools' environment fixes

PARAMS = ('density', 'mass_threshold', 'threshold_scale')
FIELDS = ('param', 'value', 'metric', 'accuracy', 'gflops', 'flops_ratio',
          'mean_density', 'images_per_s', 'throughput_ratio')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Sweep the pruning setting of a token-pruned checkpoint')
    parser.add_argument('config', help='config file (or toolbox::path)')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--param', choices=PARAMS, default='mass_threshold',
                        help='the setting to sweep (threshold_scale '
                        'multiplies the learned AS-ViT thresholds)')
    parser.add_argument('--values', type=float, nargs='+',
                        default=[0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
    parser.add_argument('--num-images', type=int, default=1000,
                        help='images of the test set to evaluate')
    parser.add_argument('--batch-size', type=int, default=1,
                        help='1: exact per-image pruning; more: the '
                        "backbone's batch_mode (pad or mean)")
    parser.add_argument('--rounds', type=int, default=5,
                        help='interleaved timing rounds (each runs every '
                        'setting once over the batches)')
    parser.add_argument('--out-dir', default='work_dirs/density_sweep')
    parser.add_argument('--tiny', action='store_true',
                        help='apply the tiny overlay (generated data)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override settings of the config')
    return parser.parse_args(argv)


def build_classifier(cfg, checkpoint):
    """The classifier without its teacher (evaluation needs none)."""
    cfg.model.teacher = None
    cfg.model.token_distill_weight = 0.
    cfg.model.tis_distill_weight = 0.
    model = build_model(cfg, checkpoint)
    if not hasattr(model, 'set_test_cfg'):
        raise ValueError('density_sweep needs a mmvitaccel.'
                         f'TokenPrunedClassifier, got {type(model).__name__}')
    return model


def apply_setting(model, param, value, thresholds):
    """Set ``param`` to ``value`` (pruning on); ``value=None``: dense."""
    bb = model.backbone
    if value is None:
        model.set_test_cfg(prune=False)
        return
    model.set_test_cfg(prune=True)
    if param == 'threshold_scale':
        if bb.thresholds is None:
            raise ValueError('threshold_scale needs selector=threshold')
        with torch.no_grad():
            bb.thresholds.copy_(thresholds * value)
    else:
        if param == 'density' and bb.selector != 'value' or \
                param == 'mass_threshold' and bb.selector != 'mass':
            raise ValueError(f'{param} does not act on the {bb.selector!r} '
                             'selector of this model')
        model.set_test_cfg(**{param: value})


def evaluate(model, batches, evaluator, dense_flops, desc):
    """Accuracy and mean FLOPs/density of one setting."""
    bb = model.backbone
    flops, density, images = [], [], 0
    first = bb.prune_before[0]
    for batch in tqdm(batches, desc=desc, unit='batch', leave=False):
        with torch.no_grad():
            preds = model(**model.data_preprocessor(batch, False),
                          mode='predict')
        images += len(preds)
        counts = bb.token_counts
        patches = counts[:, 0] - 1
        saved = bb.dense_flops(counts[0, 0].item()) - bb.analytic_flops()
        flops += (dense_flops - saved).tolist()
        density += ((counts[:, first:] - 1) / patches[:, None]).mean(
            dim=1).tolist()
        evaluator.process(preds, batch)
    metrics = evaluator.evaluate(images)
    return metrics, sum(flops) / len(flops), sum(density) / len(density)


def time_settings(model, batches, param, settings, thresholds, rounds):
    """Throughput of every setting over ``batches``, timed interleaved.

    Returns:
        BenchmarkResult: names ``'dense'`` (the baseline) and the values.
    """
    inputs = [model.data_preprocessor(b, False) for b in batches]

    def runner(value):
        def run():
            apply_setting(model, param, value, thresholds)
            with torch.no_grad():
                for data in inputs:
                    model(**data, mode='predict')
        return run

    fns = {label: runner(value) for label, value in settings}
    return interleaved_benchmark(
        fns, rounds=rounds, iters_per_round=1, warmup=1,
        items_per_call=sum(len(d['inputs']) for d in inputs),
        baseline='dense', progress=True)


def plot(rows, path):
    """Accuracy against GFLOPs, one point per setting, labelled."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4.5))
    sparse = [r for r in rows if r['param'] != 'dense']
    ax.plot([r['gflops'] for r in sparse], [r['accuracy'] for r in sparse],
            'o-', label=f'{sparse[0]["param"]} sweep' if sparse else '')
    for r in sparse:
        ax.annotate(f'{r["value"]:g}', (r['gflops'], r['accuracy']),
                    textcoords='offset points', xytext=(4, 4), fontsize=8)
    dense = [r for r in rows if r['param'] == 'dense']
    if dense:
        ax.plot(dense[0]['gflops'], dense[0]['accuracy'], 's', color='k',
                label='dense (no pruning)')
    ax.set_xlabel('GFLOPs per image')
    ax.set_ylabel(rows[0]['metric'])
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    args = parse_args(argv)
    cfg = load_config(args.config, args.cfg_options, tiny=args.tiny)
    model = build_classifier(cfg, args.checkpoint)
    batches = real_data_batches(cfg, args.num_images, args.batch_size)
    from mmengine.evaluator import Evaluator
    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope')):
        evaluator = Evaluator(cfg.test_evaluator)

    thresholds = None if model.backbone.thresholds is None else \
        model.backbone.thresholds.detach().clone()
    # the unpruned model's FLOPs (the tensor mode runs the backbone with its
    # own settings, not test_cfg)
    sample = model.data_preprocessor(batches[0], False)['inputs'][:1]
    prune = model.backbone.prune
    model.backbone.set_pruning(prune=False)
    dense_flops = count_flops(model, sample, dict(mode='tensor')).total
    model.backbone.set_pruning(prune=prune)

    rows = []
    settings = [('dense', None)] + [(args.param, v) for v in args.values]
    for param, value in tqdm(settings, desc='sweep', unit='setting'):
        apply_setting(model, args.param, value, thresholds)
        metrics, flops, density = evaluate(
            model, batches, evaluator, dense_flops,
            f'{param}={value if value is not None else "-"}')
        key = next((k for k in metrics if 'top1' in k), next(iter(metrics)))
        rows.append(dict(param=param, value=value if value is not None else 1.,
                         metric=key, accuracy=float(metrics[key]),
                         gflops=flops / 1e9, flops_ratio=flops / dense_flops,
                         mean_density=density if value is not None else 1.))
    labelled = [('dense', None)] + [(f'{args.param}={v}', v)
                                    for v in args.values]
    timing = time_settings(model, batches, args.param, labelled, thresholds,
                           args.rounds)
    for row, (label, _) in zip(rows, labelled):
        row['images_per_s'] = timing.median[label]
        row['throughput_ratio'] = 1. if label == 'dense' else \
            timing.speedup[label].median
    apply_setting(model, args.param, 1. if args.param == 'threshold_scale'
                  else None, thresholds)

    os.makedirs(args.out_dir, exist_ok=True)
    csv_path = osp.join(args.out_dir, 'sweep.csv')
    with open(csv_path, 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    png_path = osp.join(args.out_dir, 'sweep.png')
    plot(rows, png_path)
    for row in rows:
        print(', '.join(f'{k}={row[k]:.4g}' if isinstance(row[k], float)
                        else f'{k}={row[k]}' for k in FIELDS))
    print(f'wrote {csv_path} and {png_path}')
    return rows


if __name__ == '__main__':
    main()
