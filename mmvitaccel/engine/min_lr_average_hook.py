"""The hMHSA/cFFN paper's evaluation protocol: the mean of the validation
metric over the last epochs, trained at the minimum learning rate."""
import json
import math
import os.path as osp
import warnings

from mmengine.dist import is_main_process
from mmengine.hooks import Hook

from mmvitaccel.registry import HOOKS


@HOOKS.register_module()
class MinLRAverageHook(Hook):
    """Average the validation metric over the final ``epochs`` epochs.

    The paper trains its models "at the minimum learning rate for an extra
    10 epochs", evaluates "the model's performance after each of these 10
    epochs" and reports "the accuracy of these 10 epochs" averaged. The
    recipe provides the phase (its LR scheduler ends ``epochs`` epochs
    before ``max_epochs``, after which the LR stays at its last value, the
    minimum). This hook records the metric after each validation of an
    epoch ``e`` with ``e > max_epochs - epochs`` (1-based), and after
    training logs ``min_lr_average/<metric>`` (mean over the recorded
    epochs) to the logger and the visualizer and writes
    ``<work_dir>/<out_file>``: the mean, and per epoch the metric and the
    learning rate. With ``E = epochs`` and ``T = max_epochs``, the reported
    figure is ``(1/E) * sum_{e=T-E+1}^{T} metric_e``.

    The records travel in the checkpoints' ``meta``, so a resumed run
    averages the whole phase. It warns (and still averages what it has)
    when the run is shorter than ``epochs`` (e.g. a ``--tiny`` run), when
    an epoch of the phase was not validated (``val_interval > 1``), or when
    the learning rate changed within the phase (the recipe's scheduler does
    not end in time).

    Args:
        epochs (int): length of the final phase; the paper: 10.
        metric (str): the key of the validation metric to average, e.g.
            ``'accuracy/top1'`` (mmpretrain's ``Accuracy``).
        out_file (str | None): file name under the work dir for the
            result (JSON); None writes none.
    """

    priority = 'LOW'

    def __init__(self, epochs=10, metric='accuracy/top1',
                 out_file='min_lr_average.json'):
        if isinstance(epochs, bool) or not isinstance(epochs, int) \
                or epochs < 1:
            raise ValueError(f'epochs must be a positive int, got {epochs!r}')
        if not isinstance(metric, str) or not metric:
            raise ValueError('metric must be the name of a validation '
                             f'metric (e.g. \'accuracy/top1\'), got '
                             f'{metric!r}')
        if out_file is not None and not isinstance(out_file, str):
            raise ValueError(f'out_file must be a str or None, got '
                             f'{out_file!r}')
        self.epochs = epochs
        self.metric = metric
        self.out_file = out_file
        self.first_epoch = None
        self.records = []

    def before_train(self, runner):
        max_epochs = getattr(runner.train_loop, 'max_epochs', None)
        if max_epochs is None:
            raise ValueError('MinLRAverageHook needs an epoch-based train '
                             'loop (train_cfg.by_epoch=True)')
        if max_epochs < self.epochs:
            warnings.warn(f'MinLRAverageHook: the run has {max_epochs} '
                          f'epochs, fewer than epochs={self.epochs}; '
                          'averaging over all of them')
        self.first_epoch = max(1, max_epochs - self.epochs + 1)
        # a resumed run keeps what it recorded before
        self.records = [r for r in self.records
                        if r['epoch'] <= runner.epoch]

    def after_val_epoch(self, runner, metrics=None):
        if self.first_epoch is None or runner.epoch < self.first_epoch:
            return  # not training, or before the phase
        if self.records and self.records[-1]['epoch'] == runner.epoch:
            return  # validated twice in one epoch
        metrics = metrics or {}
        if self.metric not in metrics:
            raise KeyError(f'MinLRAverageHook: metric {self.metric!r} is not '
                           f'among the validation metrics {sorted(metrics)}')
        lrs = runner.optim_wrapper.get_lr()
        lr = next(iter(lrs.values()))[0] if lrs else None
        self.records.append(
            dict(epoch=int(runner.epoch), value=float(metrics[self.metric]),
                 lr=None if lr is None else float(lr)))

    def before_save_checkpoint(self, runner, checkpoint):
        """Keep the records in the checkpoint, so that a resumed run
        averages the whole phase."""
        checkpoint.setdefault('meta', {})['min_lr_average'] = list(
            self.records)

    def after_load_checkpoint(self, runner, checkpoint):
        self.records = list(
            checkpoint.get('meta', {}).get('min_lr_average', []))

    def average(self):
        """The mean of the recorded metric values (None before any)."""
        if not self.records:
            return None
        return sum(r['value'] for r in self.records) / len(self.records)

    def after_train(self, runner):
        if not self.records:
            warnings.warn('MinLRAverageHook: no validation in the final '
                          f'{self.epochs} epochs; nothing to average')
            return
        epochs = [r['epoch'] for r in self.records]
        expected = list(range(self.first_epoch, runner.train_loop.max_epochs
                              + 1))
        if epochs != expected:
            warnings.warn(f'MinLRAverageHook: validated epochs {epochs} of '
                          f'the phase {expected}; set val_interval=1 for the '
                          'paper\'s protocol')
        lrs = [r['lr'] for r in self.records if r['lr'] is not None]
        constant = all(math.isclose(lr, lrs[0], rel_tol=1e-6) for lr in lrs)
        if not constant:
            warnings.warn(f'MinLRAverageHook: the learning rate changed in '
                          f'the final phase ({lrs}); end the LR scheduler '
                          f'{self.epochs} epochs before max_epochs')
        mean = self.average()
        key = f'min_lr_average/{self.metric}'
        runner.logger.info(f'{key}: {mean:.6g} (mean over epochs {epochs})')
        runner.message_hub.update_scalar(key, mean)
        runner.visualizer.add_scalars({key: mean}, step=runner.epoch)
        if self.out_file and is_main_process():
            with open(osp.join(runner.work_dir, self.out_file), 'w') as f:
                json.dump(dict(metric=self.metric, average=mean,
                               constant_lr=constant, epochs=self.records), f,
                          indent=1)
