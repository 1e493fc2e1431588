"""The load report counts each of the model's tensors once (issue 40, item
8): a checkpoint of a wider model was reported as '1 of the 303 tensors'
for a model of 152, its tensors of other shapes counted as both missing and
mismatched."""
from collections import Counter
from types import SimpleNamespace

import pytest
from mmpretrain.models import VisionTransformer

from mmvitaccel.engine.checkpoint_check_hook import CheckpointCheckHook
from mmvitaccel.models.utils import (compare_state_dict, load_with_report,
                                     loaded_share, report_summary)

NARROW = dict(embed_dims=32, num_layers=3, num_heads=2,
              feedforward_channels=64)
WIDE = dict(embed_dims=64, num_layers=2, num_heads=2, feedforward_channels=128)


def _vit(arch):
    return VisionTransformer(arch=arch, img_size=32, patch_size=16)


class _Log:
    """Records what a logger is given."""

    def __init__(self):
        self.lines = []

    def info(self, msg):
        self.lines.append(('info', msg))

    def warning(self, msg):
        self.lines.append(('warning', msg))


def _counted(report):
    """Each model key as often as the report counts it."""
    keys = report['loaded'] + report['new'] + report['missing'] + [
        entry.split(':')[0] for entry in report['mismatched']]
    return Counter(keys)


def test_another_width_counts_each_tensor_once():
    own = _vit(NARROW).state_dict()
    wide = _vit(WIDE).state_dict()
    report, loadable = compare_state_dict(own, wide)
    assert _counted(report) == Counter(list(own))  # every tensor exactly once
    assert report['mismatched'] and report['missing']  # width, layer 2
    assert all(k.startswith('layers.2.') for k in report['missing'])
    assert report['unused'] == [] and set(loadable) == set(report['loaded'])
    share, expected = loaded_share(report)
    assert expected == len(own) and share == len(report['loaded']) / len(own)


def test_a_mismatched_new_parameter_is_counted_once():
    own = _vit(NARROW).state_dict()
    report, _ = compare_state_dict(own, _vit(WIDE).state_dict(),
                                   new_prefixes=('layers.2.', 'cls_token'))
    assert _counted(report) == Counter(list(own))
    assert 'cls_token' not in report['new']  # the checkpoint has it, wrongly
    assert report['new'] and report['missing'] == []
    assert loaded_share(report)[1] == len(own) - len(report['new'])


def test_refusal_names_the_model_count():
    model = _vit(NARROW)
    n = len(model.state_dict())
    loaded = len(compare_state_dict(model.state_dict(),
                                    _vit(WIDE).state_dict())[0]['loaded'])
    with pytest.raises(ValueError, match=(
            rf'provides {loaded} of the {n} tensors .*'
            rf'loaded {loaded}/{n}; new 0, missing \d+, unused 0, '
            rf'mismatched \d+\)')):
        load_with_report(model, _vit(WIDE).state_dict())


def test_success_logs_the_full_count():
    source, model = _vit(NARROW), _vit(NARROW)
    n = len(model.state_dict())
    log = _Log()
    report = load_with_report(model, source.state_dict(), logger=log)
    assert log.lines == [
        ('info', f'VisionTransformer: loaded {n}/{n}; new 0, missing 0, '
         f'unused 0')]
    assert report_summary(report) == f'loaded {n}/{n}; new 0, missing 0, ' \
        'unused 0'
    # opted out: the mismatched are counted, once
    log = _Log()
    report = load_with_report(model, _vit(WIDE).state_dict(), logger=log,
                              min_share=0)
    kinds = {k: len(report[k]) for k in ('loaded', 'missing', 'mismatched')}
    assert sum(kinds.values()) == n
    assert log.lines[0] == ('info', (
        f'VisionTransformer: loaded {kinds["loaded"]}/{n}; new 0, missing '
        f'{kinds["missing"]}, unused 0, mismatched {kinds["mismatched"]}'))


def test_the_checkpoint_hook_counts_each_tensor_once():
    model = _vit(NARROW)
    n = len(model.state_dict())
    runner = SimpleNamespace(model=model, _load_from='wide.pth',
                             _resume=False)
    hook = CheckpointCheckHook()
    with pytest.raises(ValueError, match=rf'matches \d+ of the {n} tensors'):
        hook.after_load_checkpoint(
            runner, dict(state_dict=_vit(WIDE).state_dict(), meta={}))
    assert _counted(hook.report) == Counter(list(model.state_dict()))


def test_the_hook_reads_the_configs_opt_out():
    """A hook written into ``custom_hooks`` (by ``tools/accelerate.py``)
    takes the config's ``checkpoint_check.min_loaded_share`` under any
    runner; an explicit argument wins."""
    from mmengine.config import Config
    model = _vit(NARROW)
    wide = dict(state_dict=_vit(WIDE).state_dict(), meta={})
    opt_out = Config(dict(checkpoint_check=dict(min_loaded_share=0)))
    runner = SimpleNamespace(model=model, _load_from='wide.pth',
                             _resume=False, cfg=opt_out)
    CheckpointCheckHook().after_load_checkpoint(runner, dict(wide))
    with pytest.raises(ValueError, match='matches'):
        CheckpointCheckHook(min_loaded_share=0.5).after_load_checkpoint(
            runner, dict(wide))
    runner.cfg = Config(dict(checkpoint_check=dict(min_loaded_share=2)))
    with pytest.raises(ValueError, match=r'in \[0, 1\]'):
        CheckpointCheckHook().after_load_checkpoint(runner, dict(wide))
