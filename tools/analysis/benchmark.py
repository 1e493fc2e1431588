# Copyright (c) mmvitaccel contributors. All rights reserved.
"""Interleaved speed comparison of a model against a baseline.

Both models are built from their configs in eval mode, run under no_grad with
a fixed number of threads, warmed up, then timed round by round in
alternation (baseline, candidate, baseline, candidate, ...), so that machine
noise hits both. Prints the median images/s of each and the speed-up
(candidate / baseline: median of the per-round ratios, with IQR and min-max).

Examples::

    python tools/analysis/benchmark.py CANDIDATE.py \
        --baseline configs/_base_/deit_s_in1k.py --rounds 10
    python tools/analysis/benchmark.py CANDIDATE.py --baseline BASE.py \
        --part model --num-images 8 --batch-size 2 --out bench.json
"""
import argparse
import os.path as osp
import sys
import tempfile
from itertools import cycle

import torch
from mmengine.config import DictAction

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, REPO)

import mmvitaccel  # noqa: E402,F401  (stack fixes, registry)
from mmvitaccel.analysis.timing import (  # noqa: E402
    default_num_threads, interleaved_benchmark)
from mmvitaccel.apis.deploy import runtime_callable  # noqa: E402
from mmvitaccel.apis.harness import (  # noqa: E402
    backbone_input, build_model, dummy_data_batch, load_config, parse_shape,
    real_data_batches, toolbox_of)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Interleaved speed benchmark of CONFIG vs --baseline')
    parser.add_argument('config', help='candidate config (or toolbox::path)')
    parser.add_argument('--baseline',
                        required=True,
                        help='baseline config (or toolbox::path)')
    parser.add_argument(
        '--shape',
        type=int,
        nargs='+',
        help='input size: H W (images) or T H W (video); toolbox default')
    parser.add_argument('--batch-size', type=int, default=1)
    parser.add_argument('--rounds', type=int, default=10)
    parser.add_argument('--iters-per-round', type=int, default=5)
    parser.add_argument('--warmup',
                        type=int,
                        default=3,
                        help='untimed calls per model')
    parser.add_argument(
        '--threads',
        type=int,
        default=default_num_threads(),
        help='torch.set_num_threads (default: the cores of this process)')
    parser.add_argument(
        '--part',
        choices=['backbone', 'model'],
        default='backbone',
        help='"backbone": the backbone on a random tensor; "model": '
        'model.test_step (preprocessing, forward, post-processing)')
    parser.add_argument(
        '--num-images',
        type=int,
        default=0,
        help='with --part model: cycle over this many images of each '
        "config's test dataloader instead of a dummy batch")
    parser.add_argument('--tiny',
                        action='store_true',
                        help='apply the tiny overlay to both')
    parser.add_argument('--checkpoint', help='weights of the candidate')
    parser.add_argument('--baseline-checkpoint',
                        help='weights of the baseline')
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--cfg-options',
                        nargs='+',
                        action=DictAction,
                        help='overrides for both configs, key=value pairs')
    parser.add_argument(
        '--runtime',
        choices=['eager', 'compile', 'onnxruntime'],
        default='eager',
        help='where both models run (--part backbone): eager PyTorch, '
        'torch.compile (inductor, fullgraph) or onnxruntime (CPU, exported)')
    parser.add_argument('--out', help='write the result as JSON here')
    return parser.parse_args(argv)


def make_runner(cfg, checkpoint, args):
    """Build one model and return ``(callable, toolbox, input description)``
    where the callable runs one batch."""
    model = build_model(cfg, checkpoint, args.device)
    toolbox = toolbox_of(model, cfg)
    shape = parse_shape(args.shape, toolbox)
    if args.part == 'backbone':
        if getattr(model, 'backbone', None) is None:
            raise ValueError(f'{type(model).__name__} has no backbone')
        x = backbone_input(toolbox, shape, args.batch_size).to(args.device)
        run = runtime_callable(
            model.backbone, x, args.runtime,
            onnx_file=osp.join(args.work_dir, f'{id(model)}.onnx'),
            threads=args.threads)
        return run, toolbox, 'x'.join(map(str, x.shape))
    if args.runtime != 'eager':
        raise ValueError(f'--runtime {args.runtime} times --part backbone')
    if args.num_images > 0:
        if args.num_images < args.batch_size:
            raise ValueError('--num-images must be >= --batch-size')
        batches = real_data_batches(cfg, args.num_images, args.batch_size)
        # full batches only, so that every call processes batch-size items
        batches = [b for b in batches if len(b['inputs']) == args.batch_size]
        used = len(batches) * args.batch_size
        desc = f'{used} test samples'
    else:
        batches = [dummy_data_batch(toolbox, shape, args.batch_size)]
        desc = 'dummy ' + 'x'.join(map(str, shape))
    it = cycle(batches)

    def run():
        with torch.no_grad():
            model.test_step(next(it))

    return run, toolbox, desc


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    tmp = tempfile.TemporaryDirectory()  # the onnxruntime exports
    args.work_dir = tmp.name
    runs, inputs = {}, {}
    for name, path, ckpt in (('baseline', args.baseline,
                              args.baseline_checkpoint),
                             ('candidate', args.config, args.checkpoint)):
        cfg = load_config(path, args.cfg_options, args.tiny)
        runs[name], toolbox, inputs[name] = make_runner(cfg, ckpt, args)
    sync = torch.cuda.synchronize if args.device.startswith('cuda') else None
    unit = 'clips/s' if toolbox == 'mmaction' else 'img/s'
    result = interleaved_benchmark(runs,
                                   rounds=args.rounds,
                                   iters_per_round=args.iters_per_round,
                                   warmup=args.warmup,
                                   items_per_call=args.batch_size,
                                   baseline='baseline',
                                   sync=sync,
                                   progress=True,
                                   settings=dict(candidate_config=args.config,
                                                 baseline_config=args.baseline,
                                                 part=args.part,
                                                 runtime=args.runtime,
                                                 inputs=inputs,
                                                 batch_size=args.batch_size,
                                                 threads=args.threads,
                                                 device=args.device,
                                                 unit=unit))
    print(f'candidate: {args.config}\nbaseline:  {args.baseline}\n'
          f'part: {args.part} ({args.runtime}), inputs: '
          f'{inputs["candidate"]}, batch '
          f'{args.batch_size}, {args.threads} threads, {args.rounds} rounds x '
          f'{args.iters_per_round} iters, warm-up {args.warmup}')
    print(result.format(unit))
    if args.out:
        result.dump(args.out)
        print(f'written to {args.out}')
    return result


if __name__ == '__main__':
    main()
