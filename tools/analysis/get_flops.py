# Copyright (c) mmvitaccel contributors. All rights reserved.
"""Params and FLOPs of a model from its config, by the project convention
(:mod:`mmvitaccel.analysis.flops`: one multiply-add = one FLOP, mmengine's
FlopAnalyzer plus an SDPA handle, eval mode, no_grad).

Examples::

    python tools/analysis/get_flops.py \
        mmpretrain::deit/deit-small_4xb256_in1k.py
    python tools/analysis/get_flops.py \
        configs/_base_/swin_s_upernet_ade20k.py --shape 512 512
    python tools/analysis/get_flops.py CONFIG --tiny --num-images 4
"""
import argparse
import os.path as osp
import sys

from mmengine.config import DictAction
from tqdm import tqdm

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, REPO)

import mmvitaccel  # noqa: E402
from mmvitaccel.analysis.flops import (  # noqa: E402
    average_flops, count_flops, count_params)
from mmvitaccel.apis.harness import (  # noqa: E402
    backbone_input, build_model, dummy_data_batch, load_config, parse_shape,
    real_data_batches, tensor_mode_kwargs, toolbox_of)

mmvitaccel.compat.apply()  # our tools' environment fixes


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Params and FLOPs of the backbone and the whole model')
    parser.add_argument('config', help='config file (or toolbox::path)')
    parser.add_argument(
        '--shape',
        type=int,
        nargs='+',
        help='input size: H W (images) or T H W (video); defaults: '
        'mmpretrain 224x224, mmdet 800x1333, mmseg 512x512, '
        'mmaction 32x224x224')
    parser.add_argument(
        '--num-images',
        type=int,
        default=0,
        help='average the whole-model FLOPs over this many images of the '
        'test dataloader (default: one dummy input of --shape)')
    parser.add_argument(
        '--tiny',
        action='store_true',
        help='apply the tiny overlay (generated data, CPU-scale sizes)')
    parser.add_argument('--checkpoint', help='optional weights to load')
    parser.add_argument(
        '--mode',
        choices=['tensor', 'predict'],
        default='tensor',
        help='forward mode of the whole model: "tensor" (default, as '
        "mmdet's get_flops; two-stage heads then run on all RPN proposals) "
        'or "predict" (with post-processing, e.g. mask heads on the final '
        'detections only)')
    parser.add_argument(
        '--module-depth',
        type=int,
        default=0,
        help='also print whole-model FLOPs per module down to this depth')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override settings of the config, key=value pairs')
    return parser.parse_args(argv)


def _fmt_shape(shape):
    return 'x'.join(str(s) for s in shape)


def _unsupported_line(ops):
    if not ops:
        return None
    items = ', '.join(f'{k} x{v}' for k, v in sorted(ops.items()))
    return f'ops counted as 0 (no handle in the convention): {items}'


def main(argv=None):
    args = parse_args(argv)
    cfg = load_config(args.config, args.cfg_options, args.tiny)
    model = build_model(cfg, args.checkpoint)
    toolbox = toolbox_of(model, cfg)
    shape = parse_shape(args.shape, toolbox)

    rows, notes = [], []

    # backbone: a random tensor of the given shape, batch 1
    if getattr(model, 'backbone', None) is not None:
        x = backbone_input(toolbox, shape)
        res = count_flops(model.backbone, x)
        rows.append(('backbone', _fmt_shape(x.shape) + ' (dummy)',
                     count_params(model.backbone), res.total))
        notes.append(_unsupported_line(res.unsupported_ops))

    # whole model: forward on preprocessed batches of one image each
    if args.mode == 'tensor':
        fwd_kwargs = tensor_mode_kwargs(toolbox)
    else:
        fwd_kwargs = dict(mode='predict')
    if args.num_images > 0:
        raw = real_data_batches(cfg, args.num_images, progress=False)
        what = 'samples' if toolbox == 'mmaction' else 'images'
        source = f'mean of {args.num_images} test {what}'
        raw = tqdm(raw, desc='counting FLOPs', unit=what[:-1])
    else:
        raw = [dummy_data_batch(toolbox, shape)]
        source = 'dummy'
    samples = (model.data_preprocessor(b, False) for b in raw)
    first = {}

    def remember(it):
        for s in it:
            first.setdefault('shape', tuple(s['inputs'].shape))
            yield s

    res = average_flops(model, remember(samples), forward_kwargs=fwd_kwargs)
    shape_str = _fmt_shape(first['shape'])
    if args.num_images > 0:
        shape_str = 'first ' + shape_str
    rows.append((f'model ({args.mode})', f'{shape_str} ({source})',
                 count_params(model), res.mean))
    notes.append(_unsupported_line(res.unsupported_ops))

    print_table(args.config, toolbox, rows)
    if args.num_images > 1:
        per = res.per_input
        print(f'whole-model GFLOPs over images: min {min(per) / 1e9:.3f}, '
              f'max {max(per) / 1e9:.3f}')
    for note in dict.fromkeys(n for n in notes if n):
        print(note)
    if args.module_depth > 0:
        print('\nwhole-model GFLOPs by module:')
        for name, flops in res.by_module.items():
            depth = 0 if name == '' else name.count('.') + 1
            if depth <= args.module_depth and flops:
                print(f'  {name or "(model)":<50} {flops / 1e9:10.3f}')
    return rows


def print_table(config, toolbox, rows):
    """Print ``(part, input, params, flops)`` rows as a table."""
    header = ('part', 'input', 'params (M)', 'GFLOPs')
    body = [(p, i, f'{n / 1e6:.2f}', f'{f / 1e9:.3f}') for p, i, n, f in rows]
    widths = [max(len(r[c]) for r in [header] + body) for c in range(4)]
    sep = '+' + '+'.join('-' * (w + 2) for w in widths) + '+'

    def line(r):
        cells = [f' {r[0]:<{widths[0]}} ', f' {r[1]:<{widths[1]}} '
                 ] + [f' {r[c]:>{widths[c]}} ' for c in (2, 3)]
        return '|' + '|'.join(cells) + '|'

    print(f'{config} ({toolbox}); FLOPs = multiply-adds, mmengine '
          'FlopAnalyzer + SDPA handle, eval, no_grad')
    print(sep)
    print(line(header))
    print(sep)
    for r in body:
        print(line(r))
    print(sep)


if __name__ == '__main__':
    main()
