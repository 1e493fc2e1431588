"""Train any mmpretrain, mmdet, mmseg or mmaction2 config (with or without
mmvitaccel components).

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT]] [--amp]
        [--tiny] [--cfg-options k=v ...] [--launcher pytorch]
"""
import argparse
import os.path as osp
import sys

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
# the repository's projects/ (configs/study/ imports projects.digits_study)
if REPO not in sys.path:
    sys.path.append(REPO)

import mmvitaccel  # noqa: E402
from mmvitaccel.apis.data_check import missing_data_message
from mmvitaccel.apis.launch import (add_common_args, build_runner, enable_amp,
                                    finish_distributed, load_config,
                                    set_local_rank)
from mmvitaccel.tiny import tinyfy_config

mmvitaccel.compat.apply()  # our tools' environment fixes


def parse_args():
    parser = argparse.ArgumentParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument(
        '--resume',
        nargs='?',
        type=str,
        const='auto',
        help='resume from the given checkpoint, or from the latest one in '
        'the work dir if no path is given')
    parser.add_argument(
        '--amp', action='store_true', help='automatic mixed precision')
    parser.add_argument(
        '--auto-scale-lr',
        action='store_true',
        help='scale the lr by the actual batch size (auto_scale_lr)')
    add_common_args(parser)
    return parser.parse_args()


def main():
    args = parse_args()
    set_local_rank(args)
    cfg = load_config(args)
    if args.amp:
        enable_amp(cfg)
    if args.auto_scale_lr:
        if 'auto_scale_lr' not in cfg or \
                'base_batch_size' not in cfg.auto_scale_lr:
            raise RuntimeError('Can not find "auto_scale_lr" or '
                               '"auto_scale_lr.base_batch_size" in the config')
        cfg.auto_scale_lr.enable = True
    if args.resume == 'auto':
        cfg.resume = True
        cfg.load_from = None
    elif args.resume is not None:
        cfg.resume = True
        cfg.load_from = args.resume
    if args.tiny:
        cfg = tinyfy_config(cfg, cfg_options=args.cfg_options)
    else:
        refusal = missing_data_message(cfg, 'train', 'train.py')
        if refusal:  # before the model is built: one line, exit status 2
            print(refusal, file=sys.stderr)
            sys.exit(2)
    runner = build_runner(cfg)
    runner.train()
    finish_distributed()


if __name__ == '__main__':
    main()
