# Copyright (c) mmvitaccel contributors. All rights reserved.
"""Export a config's model to ONNX (torch's Dynamo exporter).

Classifiers are exported whole (``model(inputs, mode='tensor')``: logits),
video recognizers with their head (one clip, ``--shape T H W``), detectors and segmentors as backbone plus neck (``extract_feat``: the
feature maps), without teachers and without the data preprocessor (the
input is the normalised image). See ``docs/deployment.md``.

Examples::

    python tools/deployment/export_onnx.py configs/stvit_deit_s_in1k.py \
        ckpt.pth --shape 224 224 --out stvit_deit_s.onnx --check
    python tools/deployment/export_onnx.py configs/stvit_r_swin_s_coco.py \
        --shape 800 1344 --dynamic --out stvit_r_swin_s_fpn.onnx --check
"""
import argparse
import os.path as osp
import sys

from mmengine.config import DictAction

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, REPO)

from mmvitaccel.apis.deploy import (  # noqa: E402
    ONNX_TOLERANCE, deploy_module, export_onnx, onnx_parity)
from mmvitaccel.apis.harness import (  # noqa: E402
    build_model, load_config, parse_shape)
from mmvitaccel.apis.torch_version import (  # noqa: E402
    DEPLOY_TORCH, require_torch)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Export the model of CONFIG to ONNX')
    parser.add_argument('config', help='config file (or toolbox::path)')
    parser.add_argument('checkpoint', nargs='?', help='weights (random if '
                        'not given)')
    parser.add_argument('--shape', type=int, nargs='+', required=True,
                        help='input size: H W (images) or T H W (video)')
    parser.add_argument('--out', required=True, help='the .onnx file')
    parser.add_argument('--dynamic', action='store_true',
                        help='dynamic input height and width')
    parser.add_argument('--batch-size', type=int, default=1)
    parser.add_argument('--opset', type=int, help='ONNX opset')
    parser.add_argument('--check', action='store_true',
                        help='compare onnxruntime (CPU) with PyTorch at the '
                        'export size (and, with --dynamic, at --check-shape)')
    parser.add_argument('--check-shape', type=int, nargs='+',
                        help='second size of --check with --dynamic, as '
                        '--shape (default: H + 32, W - 32)')
    parser.add_argument('--tolerance', type=float, default=ONNX_TOLERANCE,
                        help='max |onnxruntime - PyTorch| of --check')
    parser.add_argument('--tiny', action='store_true',
                        help='apply the tiny overlay')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config options, as tools/train.py')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        require_torch(DEPLOY_TORCH, 'ONNX export')
    except RuntimeError as err:  # a refusal: one line, exit status 2
        print(f'export_onnx.py: error: {err}', file=sys.stderr)
        raise SystemExit(2)
    cfg = load_config(args.config, args.cfg_options, tiny=args.tiny)
    model = build_model(cfg, args.checkpoint)
    module = deploy_module(model, cfg, args.batch_size)
    shape = parse_shape(args.shape, module.toolbox)
    export_onnx(module, shape, args.out, dynamic=args.dynamic,
                batch_size=args.batch_size, opset=args.opset)
    print(f'exported {module.toolbox} model of {args.config} to {args.out} '
          f'({"dynamic H, W" if args.dynamic else "static"}, example input '
          f'{(args.batch_size, 3) + shape})')
    if not args.check:
        return 0
    shapes = [shape]
    if args.dynamic:
        shapes.append(
            parse_shape(args.check_shape, module.toolbox)
            if args.check_shape else shape[:-2] + (shape[-2] + 32,
                                                   shape[-1] - 32))
    worst = 0.
    for r in onnx_parity(module, args.out, shapes, args.batch_size):
        worst = max(worst, r['max_abs_diff'])
        print(f'onnxruntime vs PyTorch at {r["shape"]}: max abs diff '
              f'{r["max_abs_diff"]:.3g} (tolerance {args.tolerance:g}); '
              f'outputs {r["outputs"]}')
    if worst > args.tolerance:
        print(f'FAILED: {worst:.3g} > {args.tolerance:g}')
        return 1
    print('check passed')
    return 0


if __name__ == '__main__':
    sys.exit(main())
