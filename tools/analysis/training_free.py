# Copyright (c) mmvitaccel contributors. All rights reserved.
"""The training-free table of ``docs/accelerate.md`` in one command: each
training-free method of the switch on the study hosts
(:mod:`projects.digits_study.study.training_free`).

1. the digits DeiT host (``configs/study/digits_deit_host.py``, cached
   under ``--work-dir`` by the classification study, trained there if
   missing), converted by ``accelerate_config`` for ``tis`` and ``cls`` at
   SaiT's value and mass settings: top-1 on the test split, FLOPs per image
   and speed against the host, timed interleaved at batch 1 and 32;
2. the training-free rows of the dense evidence (``--dense-csv``, written
   by ``tools/analysis/dense_study.py``) beside their dense models;

and writes ``training_free.csv`` to ``--out`` and prints the Markdown
table. ``--table CSV`` prints the table of a written CSV. Beside the CSV,
``training_free.png`` plots every training-free method's accuracy change
against FLOPs: the classification rows, and the dense rows of
``tools/analysis/tome_swin_designs.py`` (``--designs-csv``: ToMe's designs,
STViT-R and DGSSA-Swin on the same fine-tuned Swins); ``--plot CSV`` draws
it from a written CSV.

Example::

    python tools/analysis/training_free.py --out docs/study
"""
import argparse
import copy
import os
import os.path as osp
import sys

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, REPO)

import mmvitaccel  # noqa: E402
from projects.digits_study import study  # noqa: E402
from projects.digits_study.study import (dense_report, training_free)  # noqa: E402
from mmvitaccel.apis.harness import load_config  # noqa: E402

mmvitaccel.compat.apply()  # our tools' environment fixes


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='The training-free methods on the study hosts')
    parser.add_argument('--work-dir', default='work_dirs/study',
                        help='the classification study\'s cache (the host)')
    parser.add_argument('--dense-csv',
                        default=osp.join(REPO, 'docs', 'study', 'dense',
                                         'dense.csv'))
    parser.add_argument('--designs-csv',
                        default=osp.join(REPO, 'docs', 'study', 'dense',
                                         'tome_swin_designs.csv'))
    parser.add_argument('--out', default='work_dirs/training_free')
    parser.add_argument('--canvas-seeds', type=int, nargs='+',
                        default=[0, 1234],
                        help='test canvases drawn with these seeds (the '
                        'first is the host\'s own, also timed)')
    parser.add_argument('--rounds', type=int, default=10,
                        help='interleaved timing rounds')
    parser.add_argument('--table', metavar='CSV',
                        help='print the Markdown table of a written CSV')
    parser.add_argument('--plot', metavar='CSV',
                        help='draw training_free.png in --out from a '
                        'written CSV (and --designs-csv)')
    return parser.parse_args(argv)


def with_canvas_seed(cfg, seed):
    """``cfg`` whose test canvases are drawn with ``seed``."""
    cfg = copy.deepcopy(cfg)
    cfg.test_dataloader.dataset.canvas_seed = seed
    return cfg


def main(argv=None):
    args = parse_args(argv)
    if args.table:
        rows = training_free.read_rows(args.table)
        print(training_free.markdown_table(rows))
        return rows
    if args.plot:
        rows = training_free.read_rows(args.plot)
        _plot(rows, args)
        return rows
    cfg = load_config(osp.join(REPO, study.HOST_CONFIG))
    checkpoint = study.host_checkpoint(cfg, 0, args.work_dir)
    cfg = with_canvas_seed(cfg, args.canvas_seeds[0])
    inputs = study.test_inputs(cfg)
    others = {seed: study.test_inputs(with_canvas_seed(cfg, seed))
              for seed in args.canvas_seeds[1:]}
    rows = training_free.deit_rows(cfg, checkpoint, inputs,
                                   rounds=args.rounds, other_canvases=others)
    if osp.isfile(args.dense_csv):
        rows += training_free.dense_rows(
            dense_report.read_dense_csv(args.dense_csv))
    os.makedirs(args.out, exist_ok=True)
    path = osp.join(args.out, 'training_free.csv')
    training_free.write_rows(rows, path)
    # the table and the plot of the CSV as written (its figures rounded to
    # four digits), the record docs/accelerate.md renders
    written = training_free.read_rows(path)
    print(training_free.markdown_table(written))
    print(f'wrote {path}')
    _plot(written, args)
    return rows


def _plot(rows, args):
    os.makedirs(args.out, exist_ok=True)
    path = osp.join(args.out, 'training_free.png')
    training_free.plot_training_free(
        rows, training_free.read_design_rows(args.designs_csv), path)
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
