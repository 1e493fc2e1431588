"""Command-line handling shared by ``tools/train.py`` and ``tools/test.py``,
as the upstream tools of the four toolboxes do it."""
import os
import os.path as osp
import sys

from mmengine.config import DictAction
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

from mmvitaccel.models.utils.config import load_config_file


def refuse(message):
    """A tool's refusal of bad input: ``message`` as one line on stderr,
    exit code 2 (as argparse's own errors).

    Args:
        message (str): what is refused and what is allowed.

    Raises:
        SystemExit: always, with code 2.
    """
    print(' '.join(str(message).split()), file=sys.stderr)
    raise SystemExit(2)


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
        'input scale (see mmvitaccel.tiny)')
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm', 'mpi'],
        default='none',
        help='job launcher')
    # torch.distributed.launch passes --local-rank (torchrun uses LOCAL_RANK)
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)


def set_local_rank(args):
    """Export ``LOCAL_RANK`` as torch.distributed.launch users expect.

    Args:
        args (argparse.Namespace): parsed arguments with ``local_rank``.
    """
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)


def load_config(args):
    """Load the config and apply the options both tools take (not
    ``--tiny``: each tool applies it last, after its own edits).

    Args:
        args (argparse.Namespace): ``config``, ``work_dir``,
            ``cfg_options`` and ``launcher``.

    Returns:
        Config: the config to run.
    """
    cfg = load_config_file(args.config, args.cfg_options)
    cfg.launcher = args.launcher
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(args.config))[0])
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


def add_checkpoint_check(cfg):
    """Add :class:`~mmvitaccel.engine.CheckpointCheckHook` to the config's
    ``custom_hooks`` (in place), with the config's
    ``checkpoint_check=dict(min_loaded_share=...)`` if given.

    Args:
        cfg (Config): the config.
    """
    options = dict(cfg.get('checkpoint_check') or {})
    unknown = set(options) - {'min_loaded_share'}
    if unknown:
        raise ValueError(f'checkpoint_check takes only min_loaded_share, got '
                         f'{sorted(unknown)}')
    hooks = list(cfg.get('custom_hooks') or [])
    if any(str(h.get('type', '')).split('.')[-1] == 'CheckpointCheckHook'
           for h in hooks):
        return  # a written config's: it reads checkpoint_check itself
    hooks.append(dict(type='mmvitaccel.CheckpointCheckHook', **options))
    cfg.custom_hooks = hooks


def build_runner(cfg):
    """Build the runner as the upstream tools do (``runner_type``
    honoured), with checkpoints checked before they load.

    Args:
        cfg (Config): the config.
    """
    add_checkpoint_check(cfg)
    if 'runner_type' not in cfg:
        return Runner.from_cfg(cfg)
    return RUNNERS.build(cfg)


def finish_distributed():
    """Destroy the default process group before exit (gloo's teardown at
    exit can abort a finished rank, and torchrun then reports a failure)."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
