"""Generate the tiny datasets of :mod:`mmvitaccel.tiny.data`.

Example::

    python tools/data/make_tiny_data.py all --out data/tiny --seed 0

writes ``data/tiny/{imagenet,tinyimagenet,coco,ade20k,kinetics}``; an
up-to-date dataset is left as it is.
"""
import argparse
import os.path as osp

from mmvitaccel.tiny.data import (TINY_DATA_KINDS, default_tiny_data_dir,
                                  make_tiny_data)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Generate tiny datasets in the upstream formats.')
    parser.add_argument(
        'kind', choices=[*TINY_DATA_KINDS, 'all'], help='dataset to make')
    parser.add_argument(
        '--out',
        default=None,
        help='parent folder, each dataset goes to <out>/<kind> (default: '
        '$MMVITACCEL_TINY_DATA, else data/tiny)')
    parser.add_argument('--seed', type=int, default=0, help='random seed')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    out = args.out or default_tiny_data_dir()
    kinds = list(TINY_DATA_KINDS) if args.kind == 'all' else [args.kind]
    for kind in kinds:
        print(make_tiny_data(kind, osp.join(out, kind), seed=args.seed))


if __name__ == '__main__':
    main()
