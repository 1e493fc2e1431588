"""tools/accelerate.py as a tool (issue 40): its refusals are one line on
stderr with exit status 2, never a traceback; ``--options`` are checked
against the method backbone's arguments and validators before a config is
written; ``--list`` prints each method's options with their defaults, and
a written config is followed by the step its method needs next."""
import os.path as osp
import re
import sys

import pytest

import mmvitaccel  # noqa: F401
from mmvitaccel.switch.accelerate import METHODS, accelerate_config

from .utils import REPO

MMDET_SWIN = 'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'
MMSEG_SWIN = ('mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_'
              '8xb2-160k_ade20k-512x512.py')
MMACTION_SWIN = ('mmaction::recognition/swin/swin-tiny-p244-w877_in1k-pre_'
                 '8xb8-amp-32x2x1-30e_kinetics400-rgb.py')
MMPRETRAIN_DEIT = 'mmpretrain::deit/deit-small_4xb256_in1k.py'
MMSEG_VIT = 'mmseg::vit/vit_deit-s16_mln_upernet_8xb2-160k_ade20k-512x512.py'


def _tool():
    sys.path.insert(0, osp.join(REPO, 'tools'))
    import accelerate
    return accelerate


def _refused(capsys, argv):
    """``tools/accelerate.py argv``'s refusal: exit status 2 and one line on
    stderr, ``accelerate.py: error: ...`` (no usage, no traceback)."""
    with pytest.raises(SystemExit) as exit_:
        _tool().main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and err.startswith('accelerate.py: error: '), \
        err
    return err


def test_the_tool_refuses_missing_arguments_by_name(tmp_path, capsys):
    assert 'missing --method, --out' in _refused(capsys, [MMDET_SWIN])
    assert '--out must be a .py' in _refused(
        capsys, [MMDET_SWIN, '--method', 'dgssa', '--out',
                 str(tmp_path / 'x.txt')])
    assert "--options: expected key=value, got 'density'" in _refused(
        capsys, [MMDET_SWIN, '--method', 'dgssa', '--out',
                 str(tmp_path / 'x.py'), '--options', 'density'])


@pytest.mark.parametrize('config,method,options,match', [
    (MMPRETRAIN_DEIT, 'tis', ['densty=0.3'],
     r"tis: unknown option 'densty' of mmvitaccel.TokenPrunedVisionTransformer"
     r" \(did you mean 'density'\?\); its own options: .*density=0.5"),
    (MMPRETRAIN_DEIT, 'tis', ['density=2.0'],
     r'refuses the options density=2.0: .*density must be in \(0, 1\], '
     r'got 2.0'),
    (MMDET_SWIN, 'stvit-r', ['num_units=abc'],
     r"option num_units='abc' must be int \| None"),
    (MMDET_SWIN, 'stvit-r', ['num_units=5'],
     r'refuses the options num_units=5: .*units of 6, not 5'),
    (MMSEG_SWIN, 'dgssa', ["static_init=dgg"],
     r"refuses the options static_init='dgg': .*'dg'"),
])
def test_options_are_checked_before_the_config_is_written(
        tmp_path, capsys, config, method, options, match):
    """An option the method's backbone does not take, or a value its own
    validators refuse (a range, a type), is refused at conversion time by
    name, and nothing is written."""
    out = tmp_path / 'new.py'
    err = _refused(capsys, [config, '--method', method, '--out', str(out),
                            '--options', *options])
    assert re.search(match, err), err
    assert not out.exists()
    # the API refuses the same
    key, value = options[0].split('=')
    for number in (int, float):
        try:
            value = number(value)
            break
        except ValueError:
            pass
    with pytest.raises(ValueError, match=key):
        accelerate_config(config, method, **{key: value})


def test_good_options_pass_the_check():
    cfg = accelerate_config(MMDET_SWIN, 'stvit-r', num_units=1,
                            drop_path_rate=0.3)
    assert cfg.model.backbone.num_units == 1
    assert accelerate_config(MMPRETRAIN_DEIT, 'tis',
                             density=0.3).model.backbone.density == 0.3


def test_a_missing_checkpoint_file_is_refused(tmp_path, capsys):
    out = tmp_path / 'new.py'
    err = _refused(capsys, [MMPRETRAIN_DEIT, '--method', 'sait', '--out',
                            str(out), '--checkpoint',
                            str(tmp_path / 'no.pth')])
    assert "--checkpoint: no file '" in err and not out.exists()


@pytest.mark.parametrize('config,method,match', [
    (MMPRETRAIN_DEIT, 'stvit-r', r'stvit-r does not fit the mmpretrain '
     r'VisionTransformer.*the methods that fit this backbone: tis, cls, '
     r'sait, asvit, integrated, tome, hvit'),
    (MMACTION_SWIN, 'dgssa', r'the methods that fit this backbone: stvit$'),
    (MMSEG_VIT, 'tis', r"no method here fits the backbone 'VisionTransformer'"
     r" of scope 'mmseg'.*mmpretrain's ViT .*type "
     r"'mmvitaccel.TokenRestoreNeck'"),
    ('no/such/config.py', 'stvit-r', r"no config file 'no/such/config.py'"),
])
def test_the_tool_refuses_on_one_line(tmp_path, capsys, config, method,
                                      match):
    """A wrong host names the methods that fit the config's backbone (for
    mmseg's ViT, the supported route); a missing config is named."""
    err = _refused(capsys, [config, '--method', method, '--out',
                            str(tmp_path / 'new.py')])
    assert re.search(match, err.strip()), err


def test_a_refusal_is_one_line_without_traceback(tmp_path):
    """As a process: exit status 2 and one line on stderr."""
    import subprocess
    done = subprocess.run(
        [sys.executable, osp.join(REPO, 'tools', 'accelerate.py'),
         MMPRETRAIN_DEIT, '--method', 'stvit-r', '--out',
         str(tmp_path / 'new.py')],
        capture_output=True, text=True, cwd=str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert 'Traceback' not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        'accelerate.py: error: stvit-r does not fit'), done.stderr


def test_list_prints_each_methods_options_with_defaults(capsys):
    assert _tool().main(['--list']) is None
    out = capsys.readouterr().out
    blocks = dict(re.findall(r'^(\S+): hosts[^\n]*\n((?:  [^\n]*\n?)+)', out,
                             re.M))
    assert sorted(blocks) == sorted(METHODS)
    # the value written on the paper's host, else the backbone's default
    assert "static_blocks=6, static_init='dg', static_start=1" in \
        blocks['dgssa']
    assert 'num_units=None' in blocks['stvit-r']
    assert 'key_windows=(14, 21)' in blocks['stvit-r']
    assert "scorer='cls', selector='value', density=0.5" in blocks['cls']
    assert 'prune_before=(4, 7, 10)' in blocks['asvit']
    assert 'glad_tokens=(127, 77, 35)' in blocks['integrated']
    assert 'arguments of mmdet SwinTransformer' in blocks['stvit-r']
    assert blocks['hvit'].count('options (as written on') == 3  # per host


@pytest.mark.parametrize('config,method,options,expected', [
    (MMSEG_SWIN, 'dgssa', [], [
        'next: dgssa starts its static attention from static_init=\'dg\'',
        'python tools/dgssa_init.py {out} --checkpoint ',
        ' --out {stem}_dgssa_init.pth',
        'python tools/train.py {out} --cfg-options '
        'model.backbone.init_cfg.type=Pretrained '
        'model.backbone.init_cfg.checkpoint={stem}_dgssa_init.pth',
        "--options static_init='uniform'"]),
    (MMSEG_SWIN, 'dgssa', ['static_init=uniform'],
     ['next: fine-tune: python tools/train.py {out}']),
    (MMPRETRAIN_DEIT, 'tis', [],
     ['next: training-free on the upstream weights: python tools/test.py '
      '{out} UPSTREAM.pth'])])
def test_the_next_step_is_printed_after_wrote(tmp_path, capsys, config,
                                              method, options, expected):
    out = str(tmp_path / 'new.py')
    _tool().main([config, '--method', method, '--out', out] +
                 (['--options', *options] if options else []))
    printed = capsys.readouterr().out
    after = printed[printed.index(f'wrote {out}'):]
    for text in expected:
        assert text.format(out=out, stem=out[:-3]) in after, after
