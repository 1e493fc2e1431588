"""One switch: write a config that accelerates an upstream one.

    python tools/accelerate.py CONFIG --method METHOD --out NEW_CONFIG.py
        [--checkpoint UPSTREAM.pth] [--options k=v ...]

CONFIG is a config file or an installed toolbox's ``toolbox::path`` (for
example ``mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py``). NEW_CONFIG
inherits it through ``_base_`` and replaces only its backbone (and what the
method needs beside it), carrying every argument of the upstream backbone
over; ``--options`` set the method backbone's own arguments over the
paper's setting (``--options num_units=1``). ``--checkpoint`` gives the
upstream model's weights: the new model starts from them (``load_from``),
and the methods that distil from the upstream model (``sait``, ``asvit``,
``integrated``) need them. The methods, the hosts they
fit, their placement rules and which run training-free are in
``docs/accelerate.md``; ``--list`` prints them.
"""
import argparse
import os
import os.path as osp

from mmengine.config import Config, DictAction

import mmvitaccel  # noqa: F401  (registers components, applies compat fixes)
from mmvitaccel.apis.accelerate import METHODS, accelerated_config_text


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Accelerate the backbone of an upstream config')
    parser.add_argument('config', nargs='?',
                        help='a config file or toolbox::path')
    parser.add_argument('--method', choices=sorted(METHODS))
    parser.add_argument('--out', help='the new config file (.py)')
    parser.add_argument('--checkpoint',
                        help='the upstream weights (load_from; the teacher '
                        'of the distilling methods)')
    parser.add_argument('--options', nargs='+', action=DictAction,
                        default={}, help='method backbone arguments, k=v')
    parser.add_argument('--list', action='store_true',
                        help='print the methods and exit')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.list:
        for name, spec in METHODS.items():
            print(f'{name}: hosts {", ".join(spec.type)}; training-free: '
                  f'{spec.training_free}')
        return None
    missing = [f'--{k}' if k != 'config' else 'CONFIG'
               for k in ('config', 'method', 'out') if not getattr(args, k)]
    if missing:
        raise SystemExit(f'missing {", ".join(missing)}')
    if not args.out.endswith('.py'):
        raise SystemExit(f'--out must be a .py config file, got {args.out}')
    text = accelerated_config_text(args.config, args.out, args.method,
                                   args.checkpoint, **args.options)
    os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w') as f:
        f.write(text)
    cfg = Config.fromfile(args.out)  # the file loads
    print(text)
    print(f'wrote {args.out}: model.backbone.type = '
          f'{cfg.model.backbone.type}')
    return args.out


if __name__ == '__main__':
    main()
