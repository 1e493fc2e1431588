"""SaiT's dense/sparse alternate training as an mmengine hook."""
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper

from mmvitaccel.registry import HOOKS


def _pruned_backbone(runner):
    model = runner.model.module if is_model_wrapper(runner.model) else \
        runner.model
    backbone = getattr(model, 'backbone', None)
    if backbone is None or not hasattr(backbone, 'set_pruning'):
        raise ValueError('DenseSparseAlternateHook needs a model whose '
                         'backbone is a TokenPrunedVisionTransformer')
    return backbone


@HOOKS.register_module()
class DenseSparseAlternateHook(Hook):
    """Alternate dense and sparse training epochs (SaiT).

    The layers after the pruning location see all patch tokens in dense
    epochs and the selected tokens in sparse epochs: epoch ``e`` (0-based)
    is sparse when ``e % period >= dense_epochs``; the default
    ``period=2, dense_epochs=1`` makes even epochs dense and odd epochs
    sparse, as in the paper. Validation and testing always prune (with the
    classifier's ``test_cfg``).

    Args:
        period (int): epochs in one dense/sparse cycle.
        dense_epochs (int): dense epochs at the start of each cycle, in
            ``0 .. period``.
    """

    priority = 'NORMAL'

    def __init__(self, period=2, dense_epochs=1):
        if period < 1 or not 0 <= dense_epochs <= period:
            raise ValueError(f'need period >= 1 and 0 <= dense_epochs <= '
                             f'period, got {period}, {dense_epochs}')
        self.period = period
        self.dense_epochs = dense_epochs

    def is_sparse(self, epoch):
        """Whether 0-based ``epoch`` trains on pruned tokens."""
        return epoch % self.period >= self.dense_epochs

    def before_train_epoch(self, runner):
        sparse = self.is_sparse(runner.epoch)
        _pruned_backbone(runner).set_pruning(prune=sparse)
        runner.logger.info(f'epoch {runner.epoch + 1}: '
                           f'{"sparse" if sparse else "dense"} tokens')

    def after_train_epoch(self, runner):
        _pruned_backbone(runner).set_pruning(prune=True)
