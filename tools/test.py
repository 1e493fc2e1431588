"""Test (evaluate) a checkpoint of any mmpretrain, mmdet, mmseg or mmaction2
config.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out FILE]
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
from mmvitaccel.apis.launch import (add_common_args, build_runner,
                                    finish_distributed, load_config,
                                    set_local_rank)
from mmvitaccel.tiny import tinyfy_config

mmvitaccel.compat.apply()  # our tools' environment fixes


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Test (and eval) a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument(
        '--out', help='dump the predictions to a pickle file (.pkl)')
    add_common_args(parser)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    set_local_rank(args)
    cfg = load_config(args)
    cfg.load_from = args.checkpoint
    if args.out is not None:
        assert args.out.endswith(('.pkl', '.pickle')), \
            'The dump file must be a pkl file.'
        cfg.test_evaluator = [cfg.test_evaluator] if isinstance(
            cfg.test_evaluator, dict) else list(cfg.test_evaluator)
        cfg.test_evaluator.append(
            dict(type='DumpResults', out_file_path=args.out))
    if args.tiny:
        cfg = tinyfy_config(cfg, cfg_options=args.cfg_options)
    else:
        refusal = missing_data_message(cfg, 'test', 'test.py')
        if refusal:  # before the model is built: one line, exit status 2
            print(refusal, file=sys.stderr)
            sys.exit(2)
    runner = build_runner(cfg)
    runner.test()
    finish_distributed()
    return runner


if __name__ == '__main__':
    main()
