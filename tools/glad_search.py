"""GLAD architecture search by the accuracy metric (AM).

    python tools/glad_search.py CONFIG --checkpoint DEIT.pth
        [--static-depth 2] [--max-glad 3] [--eta 0.5] [--step 1]
        [--power 2] [--num-images 1000] [--split train] [--batch-size 32] [--tiny]
        [--out LAYOUT.json]
        [--cfg-options k=v ...]

CONFIG is an Integrated-DeiT config (``DGSSAVisionTransformer`` backbone;
its size and image size define the host). The tool runs the pretrained
dynamic host over the images, computes the expected singular values of each
layer's attention (per image and head, averaged), and chooses the GLAD
layers (at most ``--max-glad`` = Q, after the ``--static-depth`` = P DGSSA
layers 1..P) and their token counts (non-increasing, class token included,
multiples of ``--step`` patch tokens) that maximise AM under the FLOPs
ratio ``--eta`` (the paper's formulas), exactly, by dynamic programming
(:func:`mmvitaccel.ops.glad_search`). It prints the architecture, AM and
FLOPs ratio, the same for the config's own architecture, and a config
snippet; ``--out FILE`` also writes the chosen architecture as JSON
cfg-options (``model.backbone.static_layers``, ``glad_layers``,
``glad_tokens``) with its AM and FLOPs ratio under ``search``.
"""
import argparse
import os.path as osp
import sys

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
# the repository's projects/ (configs/study/ imports projects.digits_study)
if REPO not in sys.path:
    sys.path.append(REPO)

import mmvitaccel  # noqa: E402
from mmvitaccel.models import DGSSAVisionTransformer
from mmvitaccel.ops import accuracy_metric, architecture_flops, glad_search
from mmvitaccel.analysis.attention_stats import (build_host_backbone,
                                                 collect_attention)
from mmvitaccel.apis.launch import load_config_file
from mmvitaccel.tiny import tinyfy_config

mmvitaccel.compat.apply()  # our tools' environment fixes


def parse_args():
    parser = argparse.ArgumentParser(description='GLAD search by AM')
    parser.add_argument('config', help='an Integrated-DeiT config')
    parser.add_argument('--checkpoint', help='pretrained DeiT weights')
    parser.add_argument('--static-depth', '-P', type=int, default=2)
    parser.add_argument('--max-glad', '-Q', type=int, default=3)
    parser.add_argument('--eta', type=float, default=0.5)
    parser.add_argument('--step', type=int, default=1,
                        help='token counts searched: multiples of STEP '
                        'patch tokens (1: all)')
    parser.add_argument('--power', type=float, default=2,
                        help='AM uses sigma**POWER: 2 = energy (default), '
                        '1 = nuclear norm (saturates less)')
    parser.add_argument('--num-images', type=int, default=1000)
    parser.add_argument('--split', default='train',
                        choices=['train', 'val', 'test'])
    parser.add_argument('--batch-size', type=int, default=32)
    parser.add_argument('--tiny', action='store_true',
                        help='use the generated tiny data')
    parser.add_argument('--out', help='write the chosen architecture as '
                        'JSON cfg-options')
    from mmengine.config import DictAction
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    return parser.parse_args()


def describe(tokens, static_depth, glad_layers):
    parts = []
    for l, n in enumerate(tokens):
        kind = 'DGSSA' if 1 <= l <= static_depth else 'MHSA'
        glad = 'GLAD -> ' if l in glad_layers else ''
        parts.append(f'  layer {l:2d}: {glad}{n:4d} tokens, {kind}')
    return '\n'.join(parts)


def main():
    args = parse_args()
    cfg = load_config_file(args.config, args.cfg_options)
    if args.tiny:
        cfg = tinyfy_config(cfg)
    backbone = build_host_backbone(cfg, args.checkpoint)
    if not isinstance(backbone, DGSSAVisionTransformer):
        raise ValueError('GLAD search is for DeiT/ViT backbones '
                         '(Swin already has a token pyramid)')
    stats, seen = collect_attention(cfg, backbone, args.num_images,
                                    args.split, args.batch_size,
                                    singular_values=True)
    sigmas = [stats[f'layers.{i}.attn'].expected_singular_values
              for i in range(backbone.num_layers)]
    n0, d, L = backbone.tokens[0], backbone.embed_dims, backbone.num_layers
    e = backbone.num_extra_tokens
    P, Q = args.static_depth, args.max_glad
    candidates = [e + k for k in range(args.step, n0 - e, args.step)]
    print(f'expected singular values of {L} layers over {seen} images; '
          f'searching P={P}, Q<={Q}, eta<={args.eta}, '
          f'{len(candidates)} token counts')
    best = glad_search(sigmas, n0, d, P, Q, args.eta, candidates, e,
                       args.power)
    if best is None:
        raise SystemExit(f'no architecture reaches eta={args.eta} with '
                         f'P={P}, Q={Q}')
    static = list(range(1, P + 1))
    print(f'AM-optimal architecture (AM {best["am"]:.4f}, FLOPs ratio '
          f'{best["ratio"]:.4f}):')
    print(describe(best['tokens'], P, best['glad_layers']))
    bcfg = cfg.model.backbone
    own_layers = list(bcfg.get('glad_layers', ()))
    own_tokens = list(bcfg.get('glad_tokens', ()))
    if len(own_layers) == len(own_tokens) and all(
            m < n0 for m in own_tokens):
        own_am = accuracy_metric(sigmas, n0, P, own_layers, own_tokens,
                                 args.power)
        own_ratio = architecture_flops(
            n0, d, L, static, own_layers, own_tokens, e) / \
            architecture_flops(n0, d, L, [])
        print(f'the config\'s architecture: GLAD at {own_layers} to '
              f'{own_tokens} tokens: AM {own_am:.4f}, FLOPs ratio '
              f'{own_ratio:.4f}')
    print('config snippet:')
    print('model = dict(\n    backbone=dict(\n'
          f'        static_layers={tuple(static)},\n'
          f'        glad_layers={tuple(best["glad_layers"])},\n'
          f'        glad_tokens={tuple(best["glad_tokens"])}))')
    if args.out:
        write_layout(args.out, static, best)


def write_layout(path, static, best):
    """The searched architecture as JSON: ``cfg_options`` (the backbone
    keys) and ``search`` (AM and FLOPs ratio), written atomically."""
    import json
    import os
    layout = dict(
        cfg_options={
            'model.backbone.static_layers': list(static),
            'model.backbone.glad_layers': list(best['glad_layers']),
            'model.backbone.glad_tokens': list(best['glad_tokens']),
        },
        search=dict(am=float(best['am']), flops_ratio=float(best['ratio'])))
    tmp = path + '.tmp'
    with open(tmp, 'w') as f:
        json.dump(layout, f, indent=2)
    os.replace(tmp, path)
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
