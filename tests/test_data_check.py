"""The first command without the data says what to do: ``tools/train.py``
and ``tools/test.py`` refuse a config whose dataset files are missing in
one line on stderr (the path, the key that sets it, the docs section,
``--tiny``), with exit status 2 and no traceback, before the model is
built."""
import os
import os.path as osp
import subprocess
import sys

import pytest
from mmengine.config import Config

from mmvitaccel.apis.data_check import (DATASETS_DOC, data_paths,
                                        missing_data_message)

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


def test_paths_of_wrapped_datasets_and_evaluators(tmp_path):
    cfg = Config(dict(
        train_dataloader=dict(dataset=dict(
            type='RepeatDataset', times=2, dataset=dict(
                type='ConcatDataset', datasets=[
                    dict(data_root='a', ann_file='ann.json',
                         data_prefix=dict(img='imgs/')),
                    dict(data_root='s3://bucket/b', ann_file='x.json'),
                    dict(ann_file='/abs/list.txt', data_prefix='videos',
                         backend_args=dict(backend='petrel')),
                    dict(type='InMemory', canvas_size=32),
                ]))),
        val_dataloader=dict(dataset=dict(data_root='v', data_prefix='')),
        val_evaluator=[dict(type='CocoMetric', ann_file='v/ann.json'),
                       dict(type='Accuracy')],
        test_dataloader=dict(dataset=dict(data_root='t')),
        test_evaluator=dict(type='CocoMetric', ann_file='t/ann.json')))
    inner = 'train_dataloader.dataset.dataset.datasets.0'
    assert data_paths(cfg, 'train') == [
        (f'{inner}.data_root', 'a'),
        (f'{inner}.ann_file', osp.join('a', 'ann.json')),
        (f'{inner}.data_prefix.img', osp.join('a', 'imgs/')),
        ('val_dataloader.dataset.data_root', 'v'),
        ('val_evaluator.0.ann_file', 'v/ann.json'),
    ]
    assert data_paths(cfg, 'test') == [
        ('test_dataloader.dataset.data_root', 't'),
        ('test_evaluator.ann_file', 't/ann.json'),
    ]
    os.makedirs(tmp_path / 't')
    (tmp_path / 't' / 'ann.json').write_text('{}')
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        assert missing_data_message(cfg, 'test') is None
        message = missing_data_message(cfg, 'train', 'train.py')
    finally:
        os.chdir(cwd)
    assert message.startswith("train.py: no dataset at 'a' (set by "
                              f'{inner}.data_root;')
    assert f'--cfg-options {inner}.data_root=PATH' in message
    assert DATASETS_DOC in message and '--tiny' in message
    assert '\n' not in message
    assert osp.isfile(osp.join(REPO, DATASETS_DOC.split('#')[0]))


@pytest.mark.parametrize('tool, config, key', [
    ('train.py', 'stvit_r_swin_s_coco.py',
     'train_dataloader.dataset.data_root'),
    ('train.py', 'dgssa_swin_s_upernet_ade20k.py',
     'train_dataloader.dataset.data_root'),
    ('test.py', 'stvit_deit_s_in1k.py', 'test_dataloader.dataset.data_root'),
    ('train.py', 'stvit_swin_t_k400.py', 'train_dataloader.dataset.ann_file'),
])
def test_a_tool_refuses_missing_data_in_one_line(tmp_path, tool, config, key):
    command = [sys.executable, osp.join(REPO, 'tools', tool),
               osp.join(REPO, 'configs', config)]
    if tool == 'test.py':
        command.append(str(tmp_path / 'weights.pth'))
    result = subprocess.run(command + ['--work-dir', str(tmp_path / 'w')],
                            cwd=tmp_path, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 2, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    ours = [line for line in result.stderr.splitlines()
            if line.startswith(f'{tool}: ')]
    assert len(ours) == 1 and ours[0] == result.stderr.splitlines()[-1]
    assert f'(set by {key};' in ours[0] and '--tiny' in ours[0]
    # refused before the runner filled its work dir
    work_dir = tmp_path / 'w'
    assert not osp.isdir(work_dir) or not os.listdir(work_dir)
