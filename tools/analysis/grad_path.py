# Copyright (c) mmvitaccel contributors. All rights reserved.
"""Where one training step's gradient grows
(``mmvitaccel.analysis.grad_path``).

Builds the config's runner (with its ``load_from``), takes its first
training batch and runs one loss forward and backward with hooks on every
backward operation and module. Prints the losses, the parameter gradient
norm (as the optimizer wrapper would log it before clipping), the largest
parameter gradients, and the operations whose backward multiplies the
gradient by ``--gain`` or more, first in backward order first, with the
source line that made them.

Example (the study's AS-ViT on its trained host)::

    python tools/analysis/grad_path.py configs/study/asvit_digits.py \
        --cfg-options load_from=HOST.pth model.teacher.checkpoint=HOST.pth
"""
import argparse
import os.path as osp
import sys
import tempfile

import torch
from mmengine.config import DictAction

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, REPO)

import mmvitaccel  # noqa: E402
from mmvitaccel.analysis.grad_path import (amplifiers,  # noqa: E402
                                           trace_backward)
from mmvitaccel.apis.harness import load_config  # noqa: E402

mmvitaccel.compat.apply()  # our tools' environment fixes


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Per-operation gradient gains of one training step')
    parser.add_argument('config')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    parser.add_argument('--gain', type=float, default=100.,
                        help='list operations multiplying the gradient by '
                        'at least this')
    parser.add_argument('--floor', type=float, default=1.,
                        help='... and passing on more than this')
    parser.add_argument('--top', type=int, default=10,
                        help='largest parameter gradients to print')
    parser.add_argument('--modules', action='store_true',
                        help='print every module\'s output gradient too')
    parser.add_argument('--seed', type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from mmengine.runner import Runner
    cfg = load_config(args.config, args.cfg_options)
    cfg.randomness = dict(seed=args.seed, deterministic=False)
    with tempfile.TemporaryDirectory() as work_dir:
        cfg.work_dir = work_dir
        runner = Runner.from_cfg(cfg)
        runner.load_or_resume()
        batch = next(iter(runner.build_dataloader(cfg.train_dataloader)))
    model = runner.model
    model.train()
    losses = {}

    def loss_fn():
        data = model.data_preprocessor(batch, True)
        losses.update(model(**data, mode='loss'))
        return sum(v for k, v in losses.items() if 'loss' in k)

    trace = trace_backward(model, loss_fn)
    print('losses: ' + ', '.join(f'{k} {float(v):.4g}'
                                 for k, v in losses.items()))
    print(f'parameter gradient norm: {trace.total_norm:.3e}')
    print(f'largest parameter gradients (of {len(trace.params)}):')
    for name, norm in sorted(trace.params.items(),
                             key=lambda kv: -kv[1])[:args.top]:
        print(f'  {norm:10.3e}  {name}')
    found = amplifiers(trace, args.gain, args.floor)
    print(f'operations multiplying the gradient by >= {args.gain:g} '
          f'(passing on > {args.floor:g}), of {len(trace.steps)}, in '
          'backward order:')
    for s in found:
        print(f'  #{s.order:<5d} {s.op:22s} in {s.grad_in:9.3e} out '
              f'{s.grad_out:9.3e} x{s.gain:8.2e}  {s.source}')
    if args.modules:
        print('module outputs, largest |gradient|, in backward order:')
        for name, value in trace.modules.items():
            print(f'  {value:10.3e}  {name}')
    return trace, found


if __name__ == '__main__':
    with torch.random.fork_rng():
        main()
