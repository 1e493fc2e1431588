"""Dynamic-guided init of DGSSA: mean attention of a pretrained model.

    python tools/dgssa_init.py CONFIG --checkpoint HOST.pth --out OUT.pth
        [--num-images 1000] [--split train] [--batch-size 32]
        [--plot OUT.png] [--tiny] [--cfg-options k=v ...]

CONFIG is a DGSSA config (``DGSSAVisionTransformer`` or
``DGSSASwinTransformer`` backbone); HOST.pth the pretrained DeiT/Swin (any
layout the backbone reads). The tool runs the dynamic host over
``--num-images`` images of the config's ``--split`` dataloader (its own
pipeline), averages each layer's attention per head (for Swin per head over
windows and images, each block on its own, so shifted blocks separately; in
shifted blocks over the windows the shift mask leaves whole, since the mask
is applied again at run time),
and writes OUT.pth: the host weights plus ``static_logits = log(mean
attention)`` for every attention layer, which the config's backbone loads
with ``static_init='dg'`` (``init_cfg=dict(type='Pretrained',
checkpoint=OUT.pth)``). It prints the per-layer difference metric (how much
attention varies across images; low = static enough) as a table and plots
it to ``--plot`` (OUT.png by default).
"""
import argparse
import os
import os.path as osp
import sys

import torch

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
# the repository's projects/ (configs/study/ imports projects.digits_study)
if REPO not in sys.path:
    sys.path.append(REPO)

import mmvitaccel  # noqa: E402
from mmvitaccel.analysis.attention_stats import (build_host_backbone,
                                                 collect_attention,
                                                 dgssa_checkpoint)
from mmvitaccel.apis.launch import load_config_file
from mmvitaccel.tiny import tinyfy_config

mmvitaccel.compat.apply()  # our tools' environment fixes


def parse_args():
    parser = argparse.ArgumentParser(
        description='DGSSA dynamic-guided init and difference metric')
    parser.add_argument('config', help='a DGSSA config')
    parser.add_argument('--checkpoint', help='pretrained host weights')
    parser.add_argument('--out', required=True, help='checkpoint to write')
    parser.add_argument('--num-images', type=int, default=1000)
    parser.add_argument('--split', default='train',
                        choices=['train', 'val', 'test'])
    parser.add_argument('--batch-size', type=int, default=32)
    parser.add_argument('--plot', help='PNG of the difference metric '
                        '(default: OUT with .png)')
    parser.add_argument('--tiny', action='store_true',
                        help='use the generated tiny data')
    from mmengine.config import DictAction
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    return parser.parse_args()


def difference_table(stats):
    """Rows ``(layer, mean, min, max)`` of the per-head difference metric."""
    rows = []
    for name, st in stats.items():
        diff = st.difference
        rows.append((name, float(diff.mean()), float(diff.min()),
                     float(diff.max())))
    return rows


def print_table(rows, num_images):
    width = max(len(r[0]) for r in rows)
    print(f'difference metric over {num_images} images '
          '(RMS relative distance of per-image attention to the mean; '
          'per head: mean / min / max)')
    print(f'{"layer":<{width}}  {"mean":>7}  {"min":>7}  {"max":>7}')
    for name, mean, lo, hi in rows:
        print(f'{name:<{width}}  {mean:7.4f}  {lo:7.4f}  {hi:7.4f}')


def plot(rows, path, title):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(rows)), 3.5))
    x = range(len(rows))
    ax.plot(x, [r[1] for r in rows], 'o-', label='mean over heads')
    ax.fill_between(x, [r[2] for r in rows], [r[3] for r in rows],
                    alpha=0.3, label='min-max over heads')
    ax.set_xticks(list(x))
    ax.set_xticklabels([str(i) for i in x])
    ax.set_xlabel('attention layer (block index in order)')
    ax.set_ylabel('difference metric')
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main():
    args = parse_args()
    cfg = load_config_file(args.config, args.cfg_options)
    if args.tiny:
        cfg = tinyfy_config(cfg)
    backbone = build_host_backbone(cfg, args.checkpoint)
    stats, seen = collect_attention(cfg, backbone, args.num_images,
                                    args.split, args.batch_size)
    if not seen:
        raise ValueError(f'no image in the {args.split} split')
    rows = difference_table(stats)
    print_table(rows, seen)
    meta = dict(
        config=args.config,
        host_checkpoint=args.checkpoint,
        num_images=seen,
        split=args.split,
        difference={r[0]: r[1] for r in rows})
    os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
    torch.save(dgssa_checkpoint(backbone, stats, meta), args.out)
    print(f'wrote {args.out} (static logits of {len(stats)} layers)')
    png = args.plot or osp.splitext(args.out)[0] + '.png'
    plot(rows, png, f'{osp.basename(args.config)}: {seen} images')
    print(f'wrote {png}')


if __name__ == '__main__':
    main()
