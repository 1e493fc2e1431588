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

By default one run measures batch 1 and batch 32 (``--batch-size 1 32``),
each batch size interleaved on its own, the models built once. ``--out``
writes ``{"results": [one result per batch size]}``.
"""
import argparse
import json
import os
import os.path as osp
import sys
import tempfile
from itertools import cycle

import torch
from mmengine.config import DictAction

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, REPO)

import mmvitaccel  # noqa: E402
from mmvitaccel.analysis.fixed_boxes import (  # noqa: E402
    FIXED_WORK_OPTIONS, fix_detector_boxes)
from mmvitaccel.analysis.timing import (  # noqa: E402
    default_num_threads, interleaved_benchmark)
from mmvitaccel.apis.runtimes import runtime_callable  # noqa: E402
from mmvitaccel.apis.torch_version import (  # noqa: E402
    DEPLOY_TORCH, require_torch)
from mmvitaccel.apis.harness import (  # noqa: E402
    backbone_input, build_model, dummy_data_batch, load_config, parse_shape,
    real_data_batches, toolbox_of)

mmvitaccel.compat.apply()  # our tools' environment fixes


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
    parser.add_argument('--batch-size',
                        type=int,
                        nargs='+',
                        default=[1, 32],
                        help='one or more batch sizes, each measured in turn '
                        '(default: 1 32)')
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
    parser.add_argument('--baseline-cfg-options',
                        nargs='+',
                        action=DictAction,
                        help='overrides for the baseline only, after '
                        '--cfg-options (e.g. the candidate\'s config with one '
                        'switch turned off)')
    parser.add_argument(
        '--runtime',
        choices=['eager', 'compile', 'onnxruntime'],
        default='eager',
        help='where both models run (--part backbone): eager PyTorch, '
        'torch.compile (inductor, fullgraph) or onnxruntime (CPU, exported)')
    parser.add_argument(
        '--fixed-boxes',
        type=int,
        metavar='N',
        help='two-stage detectors, --part model: every model gets the same '
        'N equal proposals and keeps them through its RoI stages, with no '
        'suppression or score threshold, so that the heads do the same work '
        '(mmvitaccel.analysis.fixed_boxes)')
    parser.add_argument('--box-size',
                        type=int,
                        default=128,
                        help='side of the --fixed-boxes boxes in pixels')
    parser.add_argument('--out', help='write the result as JSON here')
    return parser.parse_args(argv)


def make_runner(cfg, checkpoint, args):
    """Build one model and return ``(runner_for, toolbox)``, where
    ``runner_for(batch_size)`` gives ``(callable, input description)`` and
    the callable runs one batch."""
    model = build_model(cfg, checkpoint, args.device)
    toolbox = toolbox_of(model, cfg)
    if args.fixed_boxes:
        if args.part != 'model' or toolbox != 'mmdet':
            raise ValueError('--fixed-boxes times the whole detector: use '
                             '--part model with an mmdet config')
        fix_detector_boxes(model, args.fixed_boxes, args.box_size)
    shape = parse_shape(args.shape, toolbox)
    if args.part == 'backbone' and getattr(model, 'backbone', None) is None:
        raise ValueError(f'{type(model).__name__} has no backbone')
    if args.part != 'backbone' and args.runtime != 'eager':
        raise ValueError(f'--runtime {args.runtime} times --part backbone')

    def runner_for(batch_size):
        if args.part == 'backbone':
            x = backbone_input(toolbox, shape, batch_size).to(args.device)
            run = runtime_callable(
                model.backbone, x, args.runtime,
                onnx_file=osp.join(args.work_dir,
                                   f'{id(model)}_b{batch_size}.onnx'),
                threads=args.threads)
            return run, 'x'.join(map(str, x.shape))
        if args.num_images > 0:
            if args.num_images < batch_size:
                raise ValueError(f'--num-images ({args.num_images}) must be '
                                 f'>= every --batch-size ({batch_size})')
            batches = real_data_batches(cfg, args.num_images, batch_size)
            # full batches only, so that every call processes batch-size items
            batches = [b for b in batches if len(b['inputs']) == batch_size]
            desc = f'{len(batches) * batch_size} test samples'
        else:
            batches = [dummy_data_batch(toolbox, shape, batch_size)]
            desc = 'dummy ' + 'x'.join(map(str, shape))
        it = cycle(batches)

        def run():
            with torch.no_grad():
                model.test_step(next(it))

        return run, desc

    return runner_for, toolbox


def main(argv=None):
    """Run the benchmark; returns one result per batch size."""
    args = parse_args(argv)
    if any(b < 1 for b in args.batch_size):
        raise ValueError(f'--batch-size must be >= 1, got {args.batch_size}')
    if args.runtime != 'eager':
        try:
            require_torch(DEPLOY_TORCH, f'--runtime {args.runtime}')
        except RuntimeError as err:  # a refusal: one line, exit status 2
            print(f'benchmark.py: error: {err}', file=sys.stderr)
            raise SystemExit(2)
    torch.set_num_threads(args.threads)
    tmp = tempfile.TemporaryDirectory()  # the onnxruntime exports
    args.work_dir = tmp.name
    factories = {}
    if args.fixed_boxes:
        args.cfg_options = {**FIXED_WORK_OPTIONS, **(args.cfg_options or {})}
    baseline_options = {**(args.cfg_options or {}),
                        **(args.baseline_cfg_options or {})}
    for name, path, ckpt, options in (
            ('baseline', args.baseline, args.baseline_checkpoint,
             baseline_options),
            ('candidate', args.config, args.checkpoint, args.cfg_options)):
        cfg = load_config(path, options or None, args.tiny)
        factories[name], toolbox = make_runner(cfg, ckpt, args)
    sync = torch.cuda.synchronize if args.device.startswith('cuda') else None
    unit = 'clips/s' if toolbox == 'mmaction' else 'img/s'
    results = []
    for batch_size in args.batch_size:
        runs, inputs = {}, {}
        for name, factory in factories.items():
            runs[name], inputs[name] = factory(batch_size)
        result = interleaved_benchmark(
            runs,
            rounds=args.rounds,
            iters_per_round=args.iters_per_round,
            warmup=args.warmup,
            items_per_call=batch_size,
            baseline='baseline',
            sync=sync,
            progress=True,
            settings=dict(candidate_config=args.config,
                          baseline_config=args.baseline,
                          baseline_cfg_options=args.baseline_cfg_options,
                          part=args.part,
                          fixed_boxes=[args.fixed_boxes, args.box_size]
                          if args.fixed_boxes else None,
                          runtime=args.runtime,
                          inputs=inputs,
                          batch_size=batch_size,
                          threads=args.threads,
                          device=args.device,
                          unit=unit))
        print(f'candidate: {args.config}\nbaseline:  {args.baseline}\n'
              f'part: {args.part} ({args.runtime}), inputs: '
              f'{inputs["candidate"]}, batch '
              f'{batch_size}, {args.threads} threads, {args.rounds} rounds '
              f'x {args.iters_per_round} iters, warm-up {args.warmup}')
        print(result.format(unit))
        results.append(result)
    if args.out:
        dirname = osp.dirname(osp.abspath(args.out))
        os.makedirs(dirname, exist_ok=True)
        with open(args.out, 'w') as f:
            json.dump(dict(results=[r.to_dict() for r in results]),
                      f,
                      indent=2)
        print(f'written to {args.out}')
    return results


if __name__ == '__main__':
    main()
