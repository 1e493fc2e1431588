# Copyright (c) mmvitaccel contributors. All rights reserved.
"""Where a config's model spends its time, by operator: eager PyTorch
(``torch.profiler``, self time of each ATen operator) or the exported graph
in onnxruntime (its profiler, kernel time by ONNX operator type). See
``docs/benchmarks.md`` and ``docs/deployment.md``.

Examples::

    python tools/analysis/profile_ops.py configs/integrated_deit_t_in1k.py \\
        --runtime eager --batch-size 1 --threads 2
    python tools/analysis/profile_ops.py configs/stvit_r_swin_s_coco.py \\
        --runtime onnxruntime --shape 800 1333 --threads 2
"""
import argparse
import os.path as osp
import sys
import tempfile

import torch
from mmengine.config import DictAction

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, REPO)

from mmvitaccel.analysis.timing import torch_op_profile  # noqa: E402
from mmvitaccel.apis.deploy import (  # noqa: E402
    deploy_module, export_program, onnx_op_profile)
from mmvitaccel.apis.harness import (  # noqa: E402
    backbone_input, build_model, load_config, parse_shape, toolbox_of)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Time by operator of CONFIG\'s model, eager or in '
        'onnxruntime')
    parser.add_argument('config', help='config file (or toolbox::path)')
    parser.add_argument('checkpoint', nargs='?', help='weights (random if '
                        'not given)')
    parser.add_argument('--shape', type=int, nargs='+',
                        help='input size: H W (images) or T H W (video); '
                        'toolbox default')
    parser.add_argument('--runtime', choices=['eager', 'onnxruntime'],
                        default='eager',
                        help='eager PyTorch, or the exported graph in '
                        'onnxruntime (as benchmark.py --runtime)')
    parser.add_argument('--part', choices=['backbone', 'model'],
                        default='backbone',
                        help='the backbone (as benchmark.py --part backbone) '
                        'or what export_onnx.py exports (tensor mode)')
    parser.add_argument('--batch-size', type=int, default=1)
    parser.add_argument('--runs', type=int, default=3,
                        help='profiled calls (after one untimed call)')
    parser.add_argument('--threads', type=int, help='intra-op threads')
    parser.add_argument('--top', type=int, default=12,
                        help='operator types printed')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config options, as tools/train.py')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.runs < 1:
        raise ValueError(f'--runs must be >= 1, got {args.runs}')
    if args.batch_size < 1:
        raise ValueError(f'--batch-size must be >= 1, got {args.batch_size}')
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = load_config(args.config, args.cfg_options)
    model = build_model(cfg, args.checkpoint)
    toolbox = toolbox_of(model, cfg)
    shape = parse_shape(args.shape, toolbox)
    if args.part == 'backbone':
        module = model.backbone
        module.eval()  # (upstream backbones' train() may return None)
    else:
        module = deploy_module(model, cfg, args.batch_size)
    x = backbone_input(toolbox, shape, args.batch_size)
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        if args.runtime == 'eager':
            result = torch_op_profile(lambda: module(x), args.runs)
            what = (f'{result["seconds_per_call"]:.4f} s per call in eager '
                    f'PyTorch, {result["op_seconds_per_call"]:.4f} s in '
                    f'operators; self time per call by operator, mean of '
                    f'{args.runs} calls')
        else:
            out = osp.join(tmp, 'model.onnx')
            program = export_program(module, x)
            torch.onnx.export(program, (x, ), dynamo=True,
                              external_data=False).save(out)
            result = onnx_op_profile(out, x, args.runs, args.threads)
            what = (f'{result["seconds_per_call"]:.3f} s per call in '
                    f'onnxruntime; kernel time by operator type over '
                    f'{args.runs} calls')
    print(f'{args.config} ({args.part}, input {tuple(x.shape)}): {what}:')
    for op, seconds, share, *counts in result['ops'][:args.top]:
        extra = ''
        if counts:  # eager: calls and multiply-adds per call
            calls, macs = counts
            extra = f'  {calls:7.1f} calls'
            if macs:
                extra += f'  {macs / 1e9:7.3f} GMAC  ' \
                    f'{macs / seconds / 1e9:6.1f} GMAC/s'
        print(f'  {op:48s} {seconds:8.4f} s  {100 * share:5.1f}%{extra}')
    return result


if __name__ == '__main__':
    main()
