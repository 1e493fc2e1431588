# Copyright (c) mmvitaccel contributors. All rights reserved.
"""The dense evidence in one command (``docs/study.md``, "Dense
prediction"): detection, segmentation and video recognition on real digit
scans, fine-tuned from a pretrained Swin classifier (and, for the pruned
DeiT, from the classification study's DeiT host; the video rows inflate
the Swin host as upstream Video Swin inflates an ImageNet Swin).

1. trains the digits Swin host (``configs/study/dense/swin_host.py``) with
   the normal runner, or reuses the checkpoint cached under ``--work-dir``
   for the same config text, and reports its top-1 on the classification
   study's test split; the DeiT rows start from the classification study's
   host (cached under ``--deit-work-dir``, trained there if missing);
2. for each task of ``configs/study/dense/methods.py``, fine-tunes every row
   from its host per seed (cached like the host; DGSSA's static logits from
   ``tools/dgssa_init.py`` on the host first) and tests it with the
   toolbox's test loop; puts the dense row's fine-tuned weights into each
   method's model with no training and tests that too;
3. measures backbone FLOPs (the one counter) and the speed ratios of the
   backbone and of the whole model against the row's dense reference
   (the fine-tuned Swin, or DeiT for the pruned DeiT), timed interleaved
   at batch 1 and 8 on the reference's test inputs, and writes
   ``dense.csv``, ``dense.png`` (metrics against FLOPs) and
   ``detections.png`` (the same test scenes predicted by the dense and the
   STViT-R detector) to ``--out``;
4. tests the weights that each row's first seed kept every
   ``--keep-every`` epochs (runs trained by this command) and writes the
   learning curves, ``curves.csv`` and ``curves.png``.

With ``--tasks``, the rows of the other tasks already in ``--out``'s CSVs
stay (one task can be run again alone). ``host.json`` records, per task,
the Swin host's top-1 its rows started from and the task's seconds.

Example::

    python tools/analysis/dense_study.py --work-dir work_dirs/dense_study \
        --out docs/study/dense

``--table CSV`` prints the Markdown table of a written CSV and runs nothing.
"""
import argparse
import json
import os
import os.path as osp
import shutil
import sys
import time

from mmengine.config import DictAction

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, REPO)

import mmvitaccel  # noqa: E402
from mmvitaccel.apis.launch import refuse  # noqa: E402
from projects.digits_study import study  # noqa: E402
from projects.digits_study.study import dense, dense_report  # noqa: E402
from mmvitaccel.apis.harness import build_model, load_config  # noqa: E402

mmvitaccel.compat.apply()  # our tools' environment fixes


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Detection, segmentation and video fine-tuned from a '
        'pretrained host: the dense evidence')
    parser.add_argument('--tasks', nargs='+', default=None,
                        help='tasks of --methods-file (default: all)')
    parser.add_argument('--methods-file',
                        default=osp.join(REPO, dense.DENSE_METHODS_FILE))
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1],
                        help='fine-tuning seeds of every row')
    parser.add_argument('--host-checkpoint',
                        help='use this Swin host instead of training one')
    parser.add_argument('--deit-checkpoint',
                        help='use this DeiT host instead of the cached one')
    parser.add_argument('--work-dir', default='work_dirs/dense_study',
                        help='cache of trained checkpoints')
    parser.add_argument('--deit-work-dir', default='work_dirs/study',
                        help='the classification study\'s cache')
    parser.add_argument('--out', default='work_dirs/dense_study/out')
    parser.add_argument('--rounds', type=int, default=15,
                        help='interleaved timing rounds')
    parser.add_argument(
        '--jobs', type=int, default=2,
        help='fine-tuning runs at once, each on cores / jobs threads '
        '(default 2: on 2 cores, 1.6 times the throughput of one run)')
    parser.add_argument(
        '--keep-every', type=int, default=4,
        help='fine-tuning runs keep their weights every so many epochs; '
        'the first seed\'s are tested for the learning curves (0: none)')
    parser.add_argument(
        '--dgssa-images', type=int, default=dense.DGSSA_IMAGES,
        help='training scenes whose mean attention gives DGSSA\'s static '
        'logits (tools/dgssa_init.py --num-images)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='overrides of every row\'s config')
    parser.add_argument('--host-cfg-options', nargs='+', action=DictAction,
                        help='overrides of the Swin host config')
    parser.add_argument('--table', metavar='CSV',
                        help='print the Markdown table of a dense.csv and '
                        'exit')
    return parser.parse_args(argv)


def hosts(args, needed):
    """The host checkpoints of the ``needed`` hosts (the DeiT host is read
    or trained only when a row starts from it), and the Swin host's test
    top-1."""
    cfg = load_config(osp.join(REPO, dense.SWIN_HOST_CONFIG),
                      args.host_cfg_options)
    found = dict(swin=args.host_checkpoint or study.host_checkpoint(
        cfg, 0, args.work_dir))
    if 'deit' in needed:
        found['deit'] = args.deit_checkpoint or study.host_checkpoint(
            load_config(osp.join(REPO, study.HOST_CONFIG)), 0,
            args.deit_work_dir)
    for name, path in found.items():
        # the configs' default paths, so that they also run by themselves
        published = osp.join(args.work_dir, f'digits_{name}_host.pth')
        if osp.abspath(path) != osp.abspath(published):
            shutil.copyfile(path, published)
    inputs = study.test_inputs(cfg)
    top1 = study.top1(build_model(cfg, found['swin']), inputs)
    return found, top1


def _test_set(row, options):
    """The test split of a row's config, through its own pipeline."""
    from mmengine.registry import DATASETS, DefaultScope
    cfg = dense.row_config(REPO, row, options)
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        return DATASETS.build(cfg.test_dataloader.dataset)


def write_outputs(out, names, rows, curves, tasks):
    """The CSVs, plots and ``host.json`` in ``out``; the rows, curves and
    ``host.json`` records of tasks other than ``names`` already there are
    kept (a run of one task updates its own).

    Args:
        out (str): the output folder.
        names (list[str]): the tasks run now.
        rows (list[dict]): their :data:`~.dense_report.DENSE_FIELDS` rows;
            the kept rows are put before them, in place.
        curves (list[dict]): their learning curve rows.
        tasks (dict): task -> ``dict(swin_host_top1, seconds)``.
    """
    os.makedirs(out, exist_ok=True)
    dense_csv, curves_csv = (osp.join(out, f) for f in ('dense.csv',
                                                         'curves.csv'))
    rows[:] = dense_report.merge_task_rows(
        rows, dense_csv, dense_report.read_dense_csv, names)
    curves = dense_report.merge_task_rows(
        curves, curves_csv, dense_report.read_curves_csv, names)
    dense_report.write_dense_csv(rows, dense_csv)
    dense_report.plot_dense(rows, osp.join(out, 'dense.png'))
    if curves:
        dense_report.write_curves_csv(curves, curves_csv)
        dense_report.plot_curves(curves, osp.join(out, 'curves.png'))
    path = osp.join(out, 'host.json')
    before = {}
    if osp.isfile(path):
        with open(path) as f:
            before = json.load(f).get('tasks', {})
    with open(path, 'w') as f:
        json.dump(dict(tasks={**before, **tasks}), f, indent=1)


def main(argv=None):
    args = parse_args(argv)
    if args.jobs < 1:
        refuse(f'--jobs must be >= 1, got {args.jobs}')
    if args.dgssa_images < 1:
        refuse(f'--dgssa-images must be >= 1, got '
               f'{args.dgssa_images}')
    if args.keep_every < 0:
        refuse(f'--keep-every must be >= 0 (0: keep nothing), got '
               f'{args.keep_every}')
    if args.table:
        rows = dense_report.read_dense_csv(args.table)
        print(dense_report.dense_markdown_table(rows))
        return rows
    start = time.time()
    tasks = dense.load_dense_tasks(args.methods_file)
    names = args.tasks or list(tasks)
    unknown = sorted(set(names) - set(tasks))
    if unknown:
        refuse(f'unknown tasks {unknown}; known: {list(tasks)}')
    os.makedirs(args.work_dir, exist_ok=True)
    checkpoints, host_top1 = hosts(
        args, {r.host for n in names for r in tasks[n][1]})
    print(f'Swin host: top-1 {host_top1:.4f} on the classification test '
          f'split ({checkpoints["swin"]})')
    options = dict(args.cfg_options or {})
    rows, curves, timing = [], [], {}
    for task in names:
        task_start = time.time()
        metrics, entries = tasks[task]
        done, first = dense.task_rows(
            REPO, task, metrics, entries, checkpoints, args.seeds,
            args.work_dir, options, progress=lambda s: print('done:', s),
            workers=args.jobs, keep_every=args.keep_every or None,
            dgssa_images=args.dgssa_images)
        by_name = {e.name: e for e in entries}
        models = {}

        def build(row):
            cfg = dense.row_config(REPO, by_name[row['method']], options)
            cfg.model.backbone.init_cfg = None
            model = build_model(cfg, first[(row['method'], row['setting'])])
            models[(row['method'], row['setting'])] = model
            return model

        fine = [r for r in done if r['setting'] == 'fine-tuned']
        test_sets = {}
        # each dense reference with its methods, timed together on the test
        # scenes as the reference's pipeline makes them
        for ref in [r['method'] for r in fine if r['reference'] is None]:
            group = [r for r in fine if ref in (r['method'], r['reference'])]
            test_sets[ref] = test_set = _test_set(by_name[ref], options)
            inputs = dense_report.dense_inputs(build(group[0]), test_set, 8)
            dense_report.measure_dense(group, build, inputs, args.rounds)
        costs = {r['method']: r for r in fine}
        for r in done:  # a training-free row runs the fine-tuned model
            if r['setting'] == 'training-free':
                r.update({k: costs[r['method']][k] for k in (
                    'params', 'backbone_gflops', 'flops_ratio',
                    'backbone_speed_b1', 'backbone_speed_b8',
                    'model_speed_b1', 'model_speed_b8')})
        if task == 'detection' and 'STViT-R' in costs:
            dense_report.prediction_picture(
                {'Swin': models[('Swin', 'fine-tuned')],
                 'STViT-R': models[('STViT-R', 'fine-tuned')]},
                test_sets['Swin'], osp.join(args.out, 'detections.png'))
        rows += done
        for entry in entries:
            curve = dense.learning_curve(
                REPO, entry, first[(entry.name, 'fine-tuned')], options)
            if len(curve) > 1:  # runs cached before kept no weights
                curves += dense_report.curve_rows(task, entry.name,
                                                  args.seeds[0], curve)
        timing[task] = dict(swin_host_top1=host_top1,
                            seconds=round(time.time() - task_start))
    write_outputs(args.out, names, rows, curves, timing)
    print(dense_report.dense_markdown_table(rows))
    print(f'wrote {args.out}/dense.csv and the plots in '
          f'{time.time() - start:.0f} s')
    return rows


if __name__ == '__main__':
    main()
