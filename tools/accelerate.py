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
``docs/accelerate.md``; ``--list`` prints them with each method's option
keys and defaults. After writing, the tool prints the step the method needs
next (``tools/dgssa_init.py`` for the DGSSA static logits, ``tools/test.py``
for a training-free method, ``tools/train.py``). A refused request (a host
the method does not fit, a missing config or checkpoint file, an option the
backbone does not take or a value its validators refuse) is one line on
stderr, ``accelerate.py: error: ...``, with exit status 2.
"""
import argparse
import os
import os.path as osp
import warnings

from mmengine.config import Config, DictAction

import mmvitaccel
from mmvitaccel.switch.accelerate import METHODS, accelerated_config_text
from mmvitaccel.switch.listing import method_options_text
from mmvitaccel.switch.switch_options import next_step

mmvitaccel.compat.apply()  # our tools' environment fixes
# mmengine's toolbox lookup imports pkg_resources, whose deprecation warning
# is not ours to print: a refusal is one line
warnings.filterwarnings('ignore', message='pkg_resources is deprecated',
                        category=UserWarning)

#: what the library raises for a request it refuses (a refusal is one line)
REFUSALS = (ValueError, TypeError, KeyError, OSError, ImportError)


class OneLineParser(argparse.ArgumentParser):
    """A parser whose refusals are one line on stderr, ``accelerate.py:
    error: ...``, with exit status 2 (no usage, no traceback)."""

    def error(self, message):
        self.exit(2, f'{self.prog}: error: {" ".join(str(message).split())}'
                  '\n')


class OptionsAction(DictAction):
    """``--options k=v ...``: mmengine's ``DictAction``, a text without
    ``=`` refused by name."""

    def __call__(self, parser, namespace, values, option_string=None):
        bad = [v for v in values if '=' not in v]
        if bad:
            raise argparse.ArgumentError(
                self, f'expected key=value, got {", ".join(map(repr, bad))}')
        super().__call__(parser, namespace, values, option_string)


def parse_args(argv=None):
    """The tool's parser and its arguments.

    Args:
        argv (list[str], optional): default ``sys.argv[1:]``.

    Returns:
        tuple[OneLineParser, argparse.Namespace]
    """
    parser = OneLineParser(
        prog='accelerate.py',
        description='Accelerate the backbone of an upstream config')
    parser.add_argument('config', nargs='?',
                        help='a config file or toolbox::path')
    parser.add_argument('--method', choices=sorted(METHODS))
    parser.add_argument('--out', help='the new config file (.py)')
    parser.add_argument('--checkpoint',
                        help='the upstream weights (load_from; the teacher '
                        'of the distilling methods): a file or URL')
    parser.add_argument('--options', nargs='+', action=OptionsAction,
                        default={}, help='method backbone arguments, k=v '
                        '(--list prints each method\'s)')
    parser.add_argument('--list', action='store_true',
                        help='print the methods, their options and exit')
    return parser, parser.parse_args(argv)


def refusal(err):
    """One line of a library refusal: a KeyError's message without its
    quotes, every line break a space."""
    text = err.args[0] if isinstance(err, KeyError) and err.args else err
    return ' '.join(str(text).split())


def main(argv=None):
    """Write the accelerated config, or refuse on one line (exit status 2).

    Returns:
        str | None: the written file (None for ``--list``).
    """
    parser, args = parse_args(argv)
    if args.list:
        print(method_options_text(METHODS))
        return None
    missing = [f'--{k}' if k != 'config' else 'CONFIG'
               for k in ('config', 'method', 'out') if not getattr(args, k)]
    if missing:
        parser.error(f'missing {", ".join(missing)}')
    if not args.out.endswith('.py'):
        parser.error(f'--out must be a .py config file, got {args.out}')
    if args.checkpoint and '://' not in args.checkpoint and \
            not osp.isfile(args.checkpoint):
        parser.error(f'--checkpoint: no file {args.checkpoint!r} (the '
                     'upstream weights: a file or a URL)')
    try:
        text = accelerated_config_text(args.config, args.out, args.method,
                                       args.checkpoint, **args.options)
        os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
        with open(args.out, 'w') as f:
            f.write(text)
    except REFUSALS as err:
        parser.error(refusal(err))
    cfg = Config.fromfile(args.out)  # the file loads
    print(text)
    backbone = cfg.model.backbone
    print(f'wrote {args.out}: model.backbone.type = {backbone.type}')
    print(next_step(args.method, args.out, backbone.to_dict(),
                    args.checkpoint, METHODS[args.method].training_free))
    return args.out


if __name__ == '__main__':
    main()
