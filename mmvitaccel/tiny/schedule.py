"""The tiny overlay's training schedule: a few epochs (or iterations) with
the recipe's LR schedulers rescaled to them."""
import math


def _rescale_schedulers(cfg, opts, total, ratio, iter_based):
    """Fit the LR schedulers to the shortened schedule (in place).

    Args:
        cfg (Config): the config.
        opts (dict): overlay options.
        total (int): the new number of epochs (or iterations).
        ratio (float): new length / recipe length.
        iter_based (bool): whether the loop counts iterations.
    """
    schedulers = cfg.get('param_scheduler')
    if schedulers is None:
        return
    if isinstance(schedulers, dict):
        schedulers = [schedulers]
    for sched in schedulers:
        if sched.get('by_epoch', True) or iter_based:
            for key in ('begin', 'end', 'T_max', 'total_iters',
                        'total_steps'):
                if isinstance(sched.get(key), (int, float)):
                    sched[key] = int(math.ceil(sched[key] * ratio))
            for key in ('milestones', 'periods'):
                if key in sched:  # a list: repeated steps keep their count
                    sched[key] = [
                        max(1, int(math.ceil(m * ratio))) for m in sched[key]
                    ]
            limit = total
        else:  # a warm-up counted in iterations inside an epoch-based loop
            limit = opts['warmup_iters']
        # every scheduler keeps a non-empty [begin, end) inside the run
        begin = min(sched.get('begin', 0), limit - 1)
        sched['begin'] = begin
        sched['end'] = max(begin + 1, min(sched.get('end', limit), limit))
        for key in ('T_max', 'total_iters', 'total_steps'):
            if key in sched:
                sched[key] = max(1, sched[key])
    cfg.param_scheduler = schedulers


def shorten_schedule(cfg, opts):
    """Cut the training loop to the overlay's length (in place).

    An iteration-based loop runs ``opts['max_iters']`` iterations, an
    epoch-based one ``opts['max_epochs']`` epochs; validation and the
    checkpoint come at the end, the LR schedulers are rescaled to the new
    length (:func:`_rescale_schedulers`) and the logger writes every
    ``opts['log_interval']`` iterations. A config without ``train_cfg`` or
    without a loop length is left as it is.

    Args:
        cfg (Config): the config.
        opts (dict): overlay options (``max_iters``, ``max_epochs``,
            ``warmup_iters``, ``log_interval``).
    """
    train_cfg = cfg.get('train_cfg')
    if not train_cfg:
        return
    if 'max_iters' in train_cfg:
        ratio = opts['max_iters'] / train_cfg['max_iters']
        train_cfg['max_iters'] = opts['max_iters']
        train_cfg['val_interval'] = opts['max_iters']
        _rescale_schedulers(cfg, opts, opts['max_iters'], ratio,
                            iter_based=True)
        checkpoint_interval = opts['max_iters']
    elif 'max_epochs' in train_cfg:
        ratio = opts['max_epochs'] / train_cfg['max_epochs']
        train_cfg['max_epochs'] = opts['max_epochs']
        train_cfg['val_interval'] = opts['max_epochs']
        if 'val_begin' in train_cfg:
            train_cfg['val_begin'] = 1
        _rescale_schedulers(cfg, opts, opts['max_epochs'], ratio,
                            iter_based=False)
        checkpoint_interval = opts['max_epochs']
    else:
        return
    hooks = cfg.get('default_hooks') or {}
    if 'checkpoint' in hooks:
        hooks['checkpoint']['interval'] = checkpoint_interval
        hooks['checkpoint'].pop('save_best', None)
    if 'logger' in hooks:
        hooks['logger']['interval'] = opts['log_interval']
