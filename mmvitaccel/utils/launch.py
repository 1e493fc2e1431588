"""Config handling shared by ``tools/train.py`` and ``tools/test.py``.

It mirrors what the upstream tools of mmpretrain, mmdet, mmseg and mmaction2
do with their command line, so that one pair of tools serves all four.
"""
import os.path as osp

from mmengine.config import Config, DictAction
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

from .tiny import tinyfy_config


def add_common_args(parser):
    """Add the arguments both tools take.

    Args:
        parser (argparse.ArgumentParser): the tool's parser.
    """
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override settings of the config, key=value, e.g. '
        'model.backbone.drop_path_rate=0.1')
    parser.add_argument(
        '--tiny',
        action='store_true',
        help='run on generated tiny data with a CPU-sized schedule and '
        'input scale (see mmvitaccel.utils.tiny)')
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm', 'mpi'],
        default='none',
        help='job launcher')
    # torch.distributed.launch passes --local-rank (torchrun uses LOCAL_RANK)
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)


def load_config(args):
    """Load the config and apply the command-line options common to tools.

    Args:
        args (argparse.Namespace): parsed arguments with ``config``,
            ``work_dir``, ``cfg_options``, ``tiny`` and ``launcher``.

    Returns:
        Config: the config to run.
    """
    cfg = Config.fromfile(args.config)
    cfg.launcher = args.launcher
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(args.config))[0])
    if args.tiny:
        cfg = tinyfy_config(cfg)
    return cfg


def enable_amp(cfg):
    """Switch the optimizer wrapper to automatic mixed precision.

    Args:
        cfg (Config): the config, changed in place.
    """
    wrapper = cfg.optim_wrapper
    if wrapper.get('type', 'OptimWrapper') != 'AmpOptimWrapper':
        assert wrapper.get('type', 'OptimWrapper') == 'OptimWrapper', (
            '--amp only works with OptimWrapper, got '
            f'{wrapper.get("type")}')
        wrapper.type = 'AmpOptimWrapper'
        wrapper.loss_scale = 'dynamic'


def build_runner(cfg):
    """Build the runner the way the upstream tools do.

    Args:
        cfg (Config): the config.

    Returns:
        mmengine.runner.Runner: the runner (``runner_type`` is honoured).
    """
    if 'runner_type' not in cfg:
        return Runner.from_cfg(cfg)
    return RUNNERS.build(cfg)
