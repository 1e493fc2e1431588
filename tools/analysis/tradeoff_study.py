# Copyright (c) mmvitaccel contributors. All rights reserved.
"""The small-scale accuracy study in one command (``docs/study.md``).

1. trains the host (``configs/study/digits_deit_host.py``) with the normal
   runner, or reuses the checkpoint cached under ``--work-dir`` for the
   same config text and seed;
2. evaluates the training-free references on the test split: token pruning
   before ``--prune-before`` by TIS, class attention and at random, at each
   ``--densities`` value, over ``--seeds`` (random's seed spread);
3. trains and evaluates the trained methods named by ``--methods`` (the
   entries of ``configs/study/methods.py``): each from the trained host,
   per seed, cached like the host;
4. measures parameters, FLOPs per image (the mean over the test split
   where the cost depends on the image) and the speed ratio to the host
   (all models timed interleaved; accuracy is evaluated at the timed
   batch size) and writes ``study.csv``, ``accuracy_vs_flops.png`` and
   ``accuracy_vs_speed.png`` to ``--out``.

Example::

    python tools/analysis/tradeoff_study.py --methods all \
        --work-dir work_dirs/study --out docs/study

``--table CSV`` prints the Markdown tables of a written CSV (all rows, then
the host and the trained methods only: the two tables of ``docs/study.md``)
and runs nothing; ``--plot CSV`` draws its two plots in ``--out`` and runs
nothing else.
"""
import argparse
import os
import os.path as osp
import sys

import torch
from mmengine.config import DictAction
from tqdm import tqdm

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, REPO)

import mmvitaccel  # noqa: E402
from mmvitaccel.apis.launch import refuse  # noqa: E402
from projects.digits_study import study  # noqa: E402
from mmvitaccel.apis.harness import load_config  # noqa: E402

mmvitaccel.compat.apply()  # our tools' environment fixes


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Accuracy against FLOPs and speed: the digits study')
    parser.add_argument('--host-config',
                        default=osp.join(REPO, study.HOST_CONFIG))
    parser.add_argument('--host-seed', type=int, default=0,
                        help='the host\'s training seed')
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2],
                        help='evaluation (and method training) seeds')
    parser.add_argument('--densities', type=float, nargs='+',
                        default=[0.1, 0.2, 0.3, 0.5, 0.7, 0.9])
    parser.add_argument('--scorers', nargs='+',
                        default=list(study.REFERENCE_SCORERS),
                        choices=['tis', 'cls', 'random', 'asvit'])
    parser.add_argument('--prune-before', type=int, nargs='+', default=[3],
                        help='0-based layers before which tokens are pruned')
    parser.add_argument('--methods', nargs='*', default=[],
                        help='trained methods (names in --methods-file); '
                        'all: every entry')
    parser.add_argument('--methods-file',
                        default=osp.join(REPO, study.METHODS_FILE))
    parser.add_argument('--num-images', type=int, default=None,
                        help='first test images only (default: all)')
    parser.add_argument('--rounds', type=int, default=10,
                        help='interleaved timing rounds (each times 5 '
                        'forwards of every model)')
    parser.add_argument('--speed-batch', type=int, default=32)
    parser.add_argument('--threads', type=int, default=None,
                        help='torch threads (default: torch\'s)')
    parser.add_argument('--work-dir', default='work_dirs/study',
                        help='cache of trained checkpoints')
    parser.add_argument('--out', default='work_dirs/study/out')
    parser.add_argument('--no-train', action='store_true',
                        help='fail instead of training a missing host')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='overrides of the host config')
    parser.add_argument('--table', metavar='CSV',
                        help='print the Markdown tables of a study.csv and '
                        'exit')
    parser.add_argument('--plot', metavar='CSV',
                        help='draw the plots of a study.csv in --out and '
                        'exit')
    return parser.parse_args(argv)


def plot(rows, out):
    """Draw ``accuracy_vs_flops.png`` and ``accuracy_vs_speed.png`` of
    ``rows`` in the folder ``out``."""
    study.plot_tradeoff(rows, osp.join(out, 'accuracy_vs_flops.png'))
    study.plot_tradeoff(rows, osp.join(out, 'accuracy_vs_speed.png'),
                        x='speed_ratio',
                        xlabel='speed ratio to the host (interleaved)')


def main(argv=None):
    args = parse_args(argv)
    if args.table:
        rows = study.read_csv(args.table)
        print(study.markdown_table(rows))
        print(study.markdown_table(rows, references=False))
        return rows
    if args.plot:
        rows = study.read_csv(args.plot)
        os.makedirs(args.out, exist_ok=True)
        plot(rows, args.out)
        print(f'wrote the plots of {args.plot} in {args.out}')
        return rows
    if args.threads:
        torch.set_num_threads(args.threads)
    known = study.load_methods(args.methods_file)
    names = list(known) if args.methods == ['all'] else args.methods
    unknown = sorted(set(names) - set(known))
    if unknown:
        refuse(f'unknown methods {unknown}; known: {list(known)}')
    cfg = load_config(args.host_config, args.cfg_options)
    settings = sum(max(1, len(known[n].settings)) for n in names)
    steps = 2 + len(args.scorers) * len(args.densities) + settings + 1
    with tqdm(total=steps, desc='study', unit='step') as bar:
        bar.set_postfix_str('host')
        ckpt = study.host_checkpoint(cfg, args.host_seed, args.work_dir,
                                     train=not args.no_train)
        bar.update()
        # accuracy at the batch the speed is timed at: AS-ViT's batch-mean
        # inference depends on the batch it runs in
        inputs = study.test_inputs(cfg, args.num_images, args.speed_batch)

        def progress(label):
            bar.set_postfix_str(label)
            bar.update()

        rows = study.reference_rows(cfg, ckpt, inputs, args.densities,
                                    args.seeds, args.scorers,
                                    args.prune_before, progress)
        rows += study.trained_rows({n: known[n] for n in names}, ckpt,
                                   inputs, args.seeds, args.work_dir, REPO,
                                   progress)
        bar.set_postfix_str('timing')
        study.measure(rows, inputs, args.rounds, args.speed_batch)
        bar.update()
    study.choose_summary(rows, {n: known[n].prefer for n in names
                                if known[n].prefer})
    os.makedirs(args.out, exist_ok=True)
    study.write_csv(rows, osp.join(args.out, 'study.csv'))
    plot(rows, args.out)
    for row in rows:
        print(f'{row["method"]:>16} {row["setting"]:>9}  top-1 '
              f'{row["top1_mean"]:.4f} +- {row["top1_std"]:.4f}  '
              f'{row["mflops"]:.2f} MFLOPs  x{row["speed_ratio"]:.2f}')
    print(f'wrote {args.out}/study.csv and the plots; host checkpoint '
          f'{ckpt}')
    return rows


if __name__ == '__main__':
    main()
