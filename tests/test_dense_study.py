"""The dense evidence (``tools/analysis/dense_study.py``), reduced: the
scene datasets, one training step of every detection and segmentation row
from a host checkpoint, the training-free conversions, the test metrics,
the costs and the outputs."""
import json
import os.path as osp
import re
import sys

import pytest
import torch

import mmvitaccel  # noqa: F401
from projects.digits_study import study
from projects.digits_study.study import dense, dense_report
from mmvitaccel.apis.harness import build_model, load_config

from .utils import REPO

#: every row: 2 training scenes (one step at batch 2), 8 test scenes
REDUCED = {
    'train_dataloader.dataset.num_scenes': 2,
    'train_dataloader.batch_size': 2,
    'test_dataloader.dataset.num_scenes': 8,
    'train_cfg.max_epochs': 1,
    'train_cfg.val_interval': 2,
}


def _host(path, config=dense.SWIN_HOST_CONFIG):
    """A host checkpoint in the host config's layout (random weights, as a
    classifier checkpoint: ``backbone.*`` and ``head.*``)."""
    cfg = load_config(osp.join(REPO, config))
    torch.manual_seed(0)
    model = build_model(cfg)
    model.init_weights()
    torch.save(dict(state_dict=model.state_dict()), path)
    return path


@pytest.fixture(scope='module')
def reduced_study(tmp_path_factory):
    sys.path.insert(0, osp.join(REPO, 'tools', 'analysis'))
    import dense_study
    work = tmp_path_factory.mktemp('dense')
    host = _host(str(work / 'host.pth'))
    deit = _host(str(work / 'deit.pth'), study.HOST_CONFIG)
    out = work / 'out'
    options = [f'{k}={v}' for k, v in REDUCED.items()]
    rows = dense_study.main([
        '--host-checkpoint', host, '--deit-checkpoint', deit, '--seeds',
        '0', '--work-dir', str(work / 'cache'), '--out', str(out),
        '--rounds', '1', '--jobs', '1', '--keep-every', '1',
        '--dgssa-images', '8',
        '--cfg-options', *options
    ])
    return rows, out, work


@pytest.mark.slow
def test_reduced_dense_study_writes_every_row_and_output(reduced_study):
    rows, out, _ = reduced_study
    tasks = dense.load_dense_tasks(osp.join(REPO, dense.DENSE_METHODS_FILE))
    expected = {(task, r.name, 'fine-tuned')
                for task, (_, entries) in tasks.items() for r in entries}
    expected |= {(task, r.name, 'training-free')
                 for task, (_, entries) in tasks.items() for r in entries
                 if r.training_free}
    assert {(r['task'], r['method'], r['setting']) for r in rows} == expected
    for r in rows:
        keys = dict(detection=('bbox_ap', 'segm_ap'), segmentation=(
            'miou', ), video=('top1', ))[r['task']]
        for k in keys:
            assert 0 <= r[k] <= 1, (r, k)
        assert r['backbone_gflops'] > 0 and r['params'] > 0
        for k in ('backbone_speed_b1', 'backbone_speed_b8', 'model_speed_b1',
                  'model_speed_b8'):
            assert r[k] > 0
        if r['reference'] is None:
            assert r['flops_ratio'] == 1 and r['model_speed_b8'] == 1
    # STViT-R's semantic tokens cut stage 3's cost
    stvit = [r for r in rows if r['method'] == 'STViT-R']
    assert all(r['flops_ratio'] < 1 for r in stvit)
    # the pruned DeiT is measured against the dense DeiT, not the Swin
    deit = {r['method']: r for r in rows if r['setting'] == 'fine-tuned'}
    assert deit['Pruned DeiT']['reference'] == 'DeiT'
    assert deit['DeiT']['backbone_gflops'] != deit['Swin']['backbone_gflops']
    for name in ('dense.csv', 'dense.png', 'detections.png', 'host.json'):
        assert osp.isfile(out / name), name
    again = dense_report.read_dense_csv(out / 'dense.csv')
    assert [r['method'] for r in again] == [r['method'] for r in rows]
    # the table (docs/study.md) renders from the CSV; each method row's
    # change is against its own dense reference
    table = dense_report.dense_markdown_table(again)
    pruned = next(r for r in again if r['method'] == 'Pruned DeiT'
                  and r['setting'] == 'fine-tuned')
    ref = next(r for r in again if r['method'] == 'DeiT')
    change = f'{100 * (pruned["miou"] - ref["miou"]):+.1f}'.replace('-', '−')
    assert f'| {change} |' in table.splitlines()[2 + again.index(pruned)]


@pytest.mark.slow
def test_tome_designs_run_on_the_cached_dense_swins(reduced_study,
                                                   monkeypatch):
    """``tools/analysis/tome_swin_designs.py`` on the reduced study's cache:
    it reuses the fine-tuned segmentor and the dense study's training-free
    conversions (trains nothing), puts each design setting's training-free
    ToMe beside them, and counts fewer backbone FLOPs the more it merges
    within a design."""
    sys.path.insert(0, osp.join(REPO, 'tools', 'analysis'))
    import tome_swin_designs
    from projects.digits_study.study import tome_designs
    _, _, work = reduced_study
    options = [f'{k}={v}' for k, v in REDUCED.items()]
    settings = tuple(tome_designs.DESIGN_SETTINGS[i] for i in (0, 2, -1))
    monkeypatch.setattr(tome_designs, 'DESIGN_SETTINGS', settings)

    def refuse(*args):
        raise AssertionError('trained again')

    monkeypatch.setattr(dense, '_train', refuse)
    rows = tome_swin_designs.main([
        '--host-checkpoint', str(work / 'host.pth'), '--seeds', '0',
        '--work-dir', str(work / 'cache'), '--out', str(work / 'designs'),
        '--jobs', '1', '--tasks', 'segmentation', '--dgssa-images', '8',
        '--cfg-options', *options])
    assert [r['design'] for r in rows] == ['host', 'window', 'window',
                                           'stage', 'STViT-R', 'DGSSA-Swin']
    host, r8, r24, stage, stvit_r, dgssa = rows
    # the peers' rows are the dense study's own, on the same weights
    study_rows, _, _ = reduced_study
    for peer in (stvit_r, dgssa):
        same = next(r for r in study_rows
                    if r['task'] == 'segmentation' and r['method'] ==
                    peer['design'] and r['setting'] == 'training-free')
        assert peer['value'] == pytest.approx(100 * same['miou'])
    assert 0 <= host['value'] <= 100
    assert host['flops_ratio'] == 1 and host['change'] == 0
    assert 1 > r8['flops_ratio'] > r24['flops_ratio']
    assert stage['flops_ratio'] < 1
    assert (work / 'designs' / 'tome_swin_designs.png').is_file()


@pytest.mark.slow
def test_training_free_rows_hold_the_dense_weights(reduced_study):
    """A training-free checkpoint has the dense model's neck and heads
    unchanged and the backbone read from the dense model's backbone."""
    _, _, work = reduced_study
    cache = work / 'cache'
    converted = sorted(
        cache.glob('detection_Swin_seed0_*/final_as_STViT_R.pth'))
    dense_ckpt = converted[0].parent / 'final.pth'
    a = torch.load(dense_ckpt, map_location='cpu')['state_dict']
    b = torch.load(converted[0], map_location='cpu')['state_dict']
    heads = [k for k in a if not k.startswith('backbone.')]
    assert heads and all(torch.equal(a[k], b[k]) for k in heads)
    shared = [k for k in a if k.startswith('backbone.stages.2.') and k in b]
    assert shared and all(torch.equal(a[k], b[k]) for k in shared)


@pytest.mark.slow
def test_runs_keep_their_weights_for_the_learning_curve(reduced_study):
    """``--keep-every 1``: every trained run keeps mmengine's
    ``epoch_1.pth``, the weights of its last (and only) epoch, without the
    optimizer state."""
    _, _, work = reduced_study
    for task in ('detection', 'segmentation'):
        for kept in (work / 'cache').glob(f'{task}_*_seed0_*/epoch_1.pth'):
            final = kept.parent / 'final.pth'
            a = torch.load(kept, map_location='cpu')
            b = torch.load(final, map_location='cpu')['state_dict']
            assert 'optimizer' not in a
            assert all(torch.equal(v, b[k])
                       for k, v in a['state_dict'].items())
            break
        else:
            raise AssertionError(f'no {task} run kept its weights')


def test_the_learning_curve_tests_each_kept_epoch(tmp_path, monkeypatch):
    """learning_curve: the kept ``epoch_{n}.pth`` in epoch order (not name
    order), then the final weights at their recorded epoch; written and
    drawn by the report."""
    tasks = dense.load_dense_tasks(osp.join(REPO, dense.DENSE_METHODS_FILE))
    row = tasks['segmentation'][1][0]
    for n in (4, 12, 8):
        torch.save(dict(state_dict={}, meta=dict(epoch=n)),
                   tmp_path / f'epoch_{n}.pth')
    (tmp_path / 'epoch_x.pth').write_bytes(b'')  # not a kept epoch
    final = tmp_path / 'final.pth'
    torch.save(dict(state_dict={}, meta=dict(seed=0, epoch=16)), final)
    tested = []

    def fake_test(repo, row, path, options=None):
        tested.append(osp.basename(path))
        return {'mIoU': 10. * len(tested), 'aAcc': 90.}

    monkeypatch.setattr(dense, 'test_metrics', fake_test)
    curve = dense.learning_curve(REPO, row, str(final))
    assert [e for e, _ in curve] == [4, 8, 12, 16]
    assert tested == ['epoch_4.pth', 'epoch_8.pth', 'epoch_12.pth',
                      'final.pth']
    rows = dense_report.curve_rows('segmentation', 'Swin', 0, curve)
    assert [r['miou'] for r in rows] == [0.1, 0.2, 0.3, 0.4]
    dense_report.write_curves_csv(rows, str(tmp_path / 'curves.csv'))
    lines = (tmp_path / 'curves.csv').read_text().splitlines()
    assert lines[0] == ','.join(dense_report.CURVE_FIELDS)
    assert lines[2] == 'segmentation,Swin,0,8,,,0.2,'
    dense_report.plot_curves(rows, str(tmp_path / 'curves.png'))
    assert (tmp_path / 'curves.png').stat().st_size > 0


def test_a_checkpoint_of_another_recipe_is_refused(tmp_path):
    """Heads that do not fit the row's model are named, not skipped."""
    tasks = dense.load_dense_tasks(osp.join(REPO, dense.DENSE_METHODS_FILE))
    seg_row = tasks['segmentation'][1][1]
    det_cfg = load_config(osp.join(REPO, tasks['detection'][1][0].config))
    det_cfg.model.backbone.init_cfg = None
    det = build_model(det_cfg)
    path = str(tmp_path / 'det.pth')
    torch.save(dict(state_dict=det.state_dict()), path)
    with pytest.raises(ValueError, match='does not fit'):
        dense.training_free_checkpoint(REPO, seg_row, path,
                                       str(tmp_path / 'x.pth'))


@pytest.mark.parametrize('bad,match', [
    (dict(host='vit'), 'host must be one of'),
    (dict(reference='Nope'), 'not a dense row'),
    (dict(extra=1), 'exactly the fields'),
])
def test_bad_method_entries_are_refused(tmp_path, bad, match):
    entry = dict(name='X', config='c.py', method=None, host='swin',
                 dgssa_init=False, reference='Swin', training_free=False,
                 paper=None)
    entry.update(bad)
    rows = [dict(name='Swin', config='c.py', method=None, host='swin',
                 dgssa_init=False, reference=None, training_free=False,
                 paper=None), entry]
    path = tmp_path / 'methods.py'
    path.write_text(f'TASKS = dict(t=dict(metrics=("mIoU", ), rows={rows!r}))')
    with pytest.raises(ValueError, match=match):
        dense.load_dense_tasks(str(path))


@pytest.mark.parametrize('bad,match', [
    (dict(host_layout='timm'), 'host_layout must be one of'),
    (dict(hosts='swin'), 'unknown fields'),
])
def test_bad_task_fields_are_refused(tmp_path, bad, match):
    rows = [dict(name='Swin', config='c.py', method=None, host='swin',
                 dgssa_init=False, reference=None, training_free=False,
                 paper=None)]
    task = dict(metrics=('mIoU', ), rows=rows, **bad)
    path = tmp_path / 'methods.py'
    path.write_text(f'TASKS = dict(t={task!r})')
    with pytest.raises(ValueError, match=match):
        dense.load_dense_tasks(str(path))


@pytest.mark.parametrize('task', ['detection', 'segmentation'])
def test_the_host_backbone_is_the_dense_rows_swin(task):
    """The host's mmpretrain Swin (pad_small_map=True) and the dense
    config's Swin (mmdet's, mmseg's) have the same tensors under the same
    names (the dense one adds only the norms of its extra outputs), and
    with the host's weights they compute the same last stage, at the
    host's 32 px and at the scenes' 160 px."""
    from mmengine.registry import MODELS, DefaultScope
    tasks = dense.load_dense_tasks(osp.join(REPO, dense.DENSE_METHODS_FILE))
    host_cfg = load_config(osp.join(REPO, dense.SWIN_HOST_CONFIG))
    row_cfg = load_config(osp.join(REPO, tasks[task][1][0].config))
    torch.manual_seed(0)
    host = build_model(host_cfg).backbone
    host.init_weights()
    bcfg = row_cfg.model.backbone.copy()
    bcfg.init_cfg = None
    with DefaultScope.overwrite_default_scope(row_cfg.default_scope):
        swin = MODELS.build(bcfg)
    theirs, ours = swin.state_dict(), host.state_dict()
    assert set(theirs) - set(ours) == {
        f'norm{i}.{p}' for i in range(3) for p in ('weight', 'bias')}
    assert set(ours) <= set(theirs)
    assert all(theirs[k].shape == v.shape for k, v in ours.items())
    swin.load_state_dict(ours, strict=False)
    host.eval()
    swin.eval()
    for size in (32, 160):
        x = torch.randn(2, 3, size, size)
        with torch.no_grad():
            assert torch.equal(host(x)[-1], swin(x)[3]), size


def test_the_deit_rows_read_the_deit_host_through_their_loader(tmp_path):
    """The DeiT rows' backbone, started from a DeiT host checkpoint by its
    own init_cfg (prefix ``backbone.``, the position embedding resized from
    the host's 8x8 grid to 20x20 on load), computes the host ViT's tokens of
    layers 2, 5, 8 and 11 bit for bit at the rows' 80 px (nothing pruned in
    the dense row: mass_threshold=1.0)."""
    from mmengine.registry import MODELS, DefaultScope
    path = _host(str(tmp_path / 'deit.pth'), study.HOST_CONFIG)
    tasks = dense.load_dense_tasks(osp.join(REPO, dense.DENSE_METHODS_FILE))
    row = next(r for r in tasks['segmentation'][1] if r.name == 'DeiT')
    row_cfg = load_config(osp.join(REPO, row.config),
                          {dense.HOST_OPTION: path})
    with DefaultScope.overwrite_default_scope(row_cfg.default_scope):
        ours = MODELS.build(row_cfg.model.backbone)
    ours.init_weights()
    host_cfg = load_config(osp.join(REPO, study.HOST_CONFIG), {
        'model.backbone.out_indices': (2, 5, 8, 11),
        'model.backbone.out_type': 'featmap',
        'model.backbone.final_norm': False})
    host = build_model(host_cfg).backbone
    state = torch.load(path, map_location='cpu')['state_dict']
    missing, unexpected = host.load_state_dict(
        {k[9:]: v for k, v in state.items() if k.startswith('backbone.')},
        strict=False)
    assert not missing and set(unexpected) == {'ln1.weight', 'ln1.bias'}
    own = ours.state_dict()
    assert set(own) == set(host.state_dict())
    assert own['pos_embed'].shape == (1, 1 + 20 * 20, 64)
    host.eval()
    ours.eval()
    x = torch.randn(2, 3, 80, 80)
    with torch.no_grad():
        expected, got = host(x), ours(x)
    assert len(got) == 4
    for e, g in zip(expected, got):
        assert torch.equal(e, g.restore())


@pytest.mark.parametrize('argv,match', [
    (['--jobs', '0'], '--jobs must be >= 1'),
    (['--keep-every', '-1'], '--keep-every must be >= 0'),
    (['--dgssa-images', '0'], '--dgssa-images must be >= 1'),
])
@pytest.mark.parametrize('tool', ['dense_study', 'tome_swin_designs'])
def test_bad_command_options_are_refused_by_name(argv, match, tool,
                                                 capsys):
    """The tools refuse them before they load or train anything."""
    if tool == 'tome_swin_designs' and argv[0] == '--keep-every':
        pytest.skip('the designs command trains no curve')
    sys.path.insert(0, osp.join(REPO, 'tools', 'analysis'))
    module = __import__(tool)
    with pytest.raises(SystemExit) as raised:
        module.main(argv)
    assert raised.value.code == 2
    assert re.match(match, capsys.readouterr().err.splitlines()[-1])


def test_a_run_of_one_task_keeps_the_other_tasks_rows(tmp_path):
    """``--tasks video`` after a full run: the video rows, curves and
    host.json record are replaced, detection's stay as they were (and
    round-trip)."""
    sys.path.insert(0, osp.join(REPO, 'tools', 'analysis'))
    import dense_study

    def row(task, method, metric, value):
        return dict(task=task, method=method, setting='fine-tuned',
                    reference=None, num_seeds=2, params=1000,
                    backbone_gflops=1.5, flops_ratio=1.0,
                    backbone_speed_b1=1.0, backbone_speed_b8=1.0,
                    model_speed_b1=1.0, model_speed_b8=1.0,
                    **{metric: value, metric + '_std': 0.01})

    def curve(task, metric, value):
        return dict(task=task, method='Swin', seed=0, epoch=4,
                    **{metric: value})

    dense_study.write_outputs(
        str(tmp_path), ['detection', 'video'],
        [row('detection', 'Swin', 'bbox_ap', 0.6),
         row('video', 'Swin', 'top1', 0.2)],
        [curve('detection', 'bbox_ap', 0.5), curve('video', 'top1', 0.1)],
        dict(detection=dict(swin_host_top1=0.97, seconds=6),
             video=dict(swin_host_top1=0.97, seconds=4)))
    dense_study.write_outputs(
        str(tmp_path), ['video'], [row('video', 'Swin', 'top1', 0.9)],
        [curve('video', 'top1', 0.8)],
        dict(video=dict(swin_host_top1=0.95, seconds=3)))
    rows = dense_report.read_dense_csv(str(tmp_path / 'dense.csv'))
    assert [(r['task'], r['bbox_ap'], r['top1']) for r in rows] == [
        ('detection', 0.6, None), ('video', None, 0.9)]
    assert rows[0]['num_seeds'] == 2 and rows[0]['reference'] is None
    curves = dense_report.read_curves_csv(str(tmp_path / 'curves.csv'))
    assert [(c['task'], c['epoch'], c['bbox_ap'], c['top1'])
            for c in curves] == [('detection', 4, 0.5, None),
                                 ('video', 4, None, 0.8)]
    with open(tmp_path / 'host.json') as f:
        assert json.load(f) == dict(tasks=dict(
            detection=dict(swin_host_top1=0.97, seconds=6),
            video=dict(swin_host_top1=0.95, seconds=3)))


def test_parallel_map_keeps_order_shares_cores_and_raises():
    """The study's parallel runs: results in the order of the calls, each
    process on its share of this process's threads, a failure raised here."""
    import operator

    from projects.digits_study.study.training import parallel_map
    calls = [(1, 2), (3, 4), (5, 6)]
    assert parallel_map(operator.add, calls, 2) == [3, 7, 11]
    assert parallel_map(operator.add, calls, 1) == [3, 7, 11]
    share = max(1, torch.get_num_threads() // 2)
    assert parallel_map(torch.get_num_threads, [(), ()], 2) == [share] * 2
    with pytest.raises(ZeroDivisionError):
        parallel_map(operator.truediv, [(1, 1), (1, 0)], 2)
    with pytest.raises(ValueError, match='workers must be >= 1'):
        parallel_map(operator.add, calls, 0)


def test_the_detectors_roi_layers_are_mmcvs_bit_for_bit():
    """The study's detector runs RoIAlign on torchvision's kernel
    (``use_torchvision``, for speed); its outputs and gradients are mmcv's
    own kernel's, bit for bit (the same bilinear samples, summed in the
    same order), on the box (7) and mask (14) layers at every FPN level."""
    from mmcv.ops import RoIAlign
    cfg = load_config(osp.join(REPO, 'configs/study/dense/swin_cascade.py'))
    torch.manual_seed(0)
    for key in ('bbox_roi_extractor', 'mask_roi_extractor'):
        extractor = cfg.model.roi_head[key]
        layer = {k: v for k, v in extractor.roi_layer.items() if k != 'type'}
        assert layer.pop('use_torchvision') is True
        for stride in extractor.featmap_strides:
            feat = torch.randn(2, 8, 160 // stride, 160 // stride,
                               requires_grad=True)
            xy = torch.rand(64, 2) * 120
            rois = torch.cat([torch.randint(0, 2, (64, 1)).float(), xy,
                              xy + torch.rand(64, 2) * 40 + 1], 1)
            grad = torch.randn(64, 8, layer['output_size'],
                               layer['output_size'])
            outs = []
            for tv in (True, False):
                feat.grad = None
                out = RoIAlign(spatial_scale=1 / stride, use_torchvision=tv,
                               **layer)(feat, rois)
                out.backward(grad)
                outs.append((out.detach(), feat.grad.clone()))
            assert torch.equal(outs[0][0], outs[1][0])
            assert torch.equal(outs[0][1], outs[1][1])


#: what the method rows ran as hand-written configs before the study took
#: the switch's conversions (docs/study.md): the switch gives the same
SETTINGS = {
    'STViT-R': dict(type='mmvitaccel.STViTRSwinTransformer'),
    'DGSSA-Swin': dict(type='mmvitaccel.DGSSASwinTransformer',
                       static_blocks=9, static_start=1, static_init='dg'),
    'STViT': dict(type='mmvitaccel.STViTSwinTransformer3D', stgm_index=6,
                  semantic_window=3, key_windows=(10, 14),
                  key_region='inside', stgm2_keys='semantic_and_image',
                  pooling='max', pretrained2d=True),
}


def _lists(value):
    """``value`` with tuples as lists (a config file keeps either)."""
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    return value


def test_the_method_rows_are_the_switchs_conversions(tmp_path):
    """Every method row of the study is ``accelerate_config`` of its dense
    reference's config (the file ``tools/accelerate.py`` writes, for the
    tools, loads to the same config): only the backbone changes (DGSSA also
    keeps its static logits out of weight decay), the backbone keeps every
    argument of the reference's, and the methods' settings are the ones the
    study documents. A row with both or neither of a config and a method,
    or an unknown method, is refused."""
    from mmengine.config import Config
    tasks = dense.load_dense_tasks(osp.join(REPO, dense.DENSE_METHODS_FILE))
    seen = set()
    for task, (_, rows) in tasks.items():
        by_name = {r.name: r for r in rows}
        for row in rows:
            if row.method is None:
                continue
            seen.add(row.name)
            ref = by_name[row.reference]
            assert row.config == ref.config
            ours = _lists(dense.row_config(REPO, row).to_dict())
            theirs = _lists(dense.row_config(REPO, ref).to_dict())
            written = _lists(Config.fromfile(
                dense.row_config_file(REPO, row, str(tmp_path))).to_dict())
            assert written == ours, row.name
            backbone = ours['model'].pop('backbone')
            ref_backbone = theirs['model'].pop('backbone')
            assert ours.pop('model') == theirs.pop('model')
            for key in ('custom_imports', 'optim_wrapper'):
                ours.pop(key), theirs.pop(key, None)
            # the switch writes the checkpoint check, which our tools add
            # to the reference's runs
            assert ours.pop('custom_hooks') == theirs.pop(
                'custom_hooks', []) + [
                    dict(type='mmvitaccel.CheckpointCheckHook')], row.name
            assert ours == theirs, row.name
            for key, value in SETTINGS[row.name].items():
                assert backbone[key] == _lists(value), (row.name, key)
            for key, value in ref_backbone.items():
                if key not in ('type', ) + tuple(SETTINGS[row.name]):
                    assert backbone[key] == value, (row.name, key)
            decay = dense.row_config(REPO, row).optim_wrapper.get(
                'paramwise_cfg', {}).get('custom_keys', {})
            assert ('static_logits' in decay) == (row.method == 'dgssa')
    assert seen == set(SETTINGS)
    bad = dict(name='X', config='c.py', method='stvit-r', host='swin',
               dgssa_init=False, reference='Swin', training_free=False,
               paper=None)
    swin = dict(bad, name='Swin', method=None, reference=None)
    for change, match in [({}, 'not both'), (dict(config=None, method=None),
                                             'not both'),
                          (dict(config=None, method='evit'),
                           'method must be one of')]:
        path = tmp_path / 'methods.py'
        rows = [swin, dict(bad, **change)]
        path.write_text(
            f'TASKS = dict(t=dict(metrics=("mIoU", ), rows={rows!r}))')
        with pytest.raises(ValueError, match=match):
            dense.load_dense_tasks(str(path))
