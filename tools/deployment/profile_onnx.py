# Copyright (c) mmvitaccel contributors. All rights reserved.
"""Where onnxruntime spends the time of a config's exported model: kernel
time by operator type (onnxruntime's profiler). See
``docs/deployment.md``.

Example::

    python tools/deployment/profile_onnx.py configs/stvit_r_swin_s_coco.py \\
        --shape 800 1333 --threads 2
"""
import argparse
import os.path as osp
import sys
import tempfile

import torch
from mmengine.config import DictAction

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, REPO)

from mmvitaccel.apis.deploy import (  # noqa: E402
    deploy_module, export_program, onnx_op_profile)
from mmvitaccel.apis.harness import (  # noqa: E402
    backbone_input, build_model, load_config, parse_shape, toolbox_of)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Profile the exported model of CONFIG in onnxruntime')
    parser.add_argument('config', help='config file (or toolbox::path)')
    parser.add_argument('checkpoint', nargs='?', help='weights (random if '
                        'not given)')
    parser.add_argument('--shape', type=int, nargs='+',
                        help='input size: H W (images) or T H W (video); '
                        'toolbox default')
    parser.add_argument('--part', choices=['backbone', 'model'],
                        default='backbone',
                        help='the backbone (as benchmark.py --runtime '
                        'onnxruntime) or what export_onnx.py exports')
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
        module = deploy_module(model, cfg)
    x = backbone_input(toolbox, shape, 1)
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        out = osp.join(tmp, 'model.onnx')
        program = export_program(module, x)
        torch.onnx.export(program, (x, ), dynamo=True,
                          external_data=False).save(out)
        result = onnx_op_profile(out, x, args.runs, args.threads)
    print(f'{args.config} ({args.part}, input {tuple(x.shape)}): '
          f'{result["seconds_per_call"]:.3f} s per call in onnxruntime; '
          f'kernel time by operator type over {args.runs} calls:')
    for op, seconds, share in result['ops'][:args.top]:
        print(f'  {op:24s} {seconds:8.3f} s  {100 * share:5.1f}%')
    return result


if __name__ == '__main__':
    main()
