"""The study's logic (``projects.digits_study.study``) and its command
(``tools/analysis/tradeoff_study.py``) on a reduced host: caching of the
trained host, training-free references, the CSV and the plots."""
import copy
import csv
import os
import os.path as osp
import sys

import pytest
import torch

import mmvitaccel  # noqa: F401
from projects.digits_study import study
from mmvitaccel.apis.harness import load_config

from .utils import REPO



def _small_host(dims, canvas):
    """Host options: 4 layers of ``dims`` channels (2 heads) on a
    ``canvas``-pixel canvas, in every split."""
    return {
        'model.backbone.arch': dict(embed_dims=dims, num_layers=4,
                                    num_heads=2,
                                    feedforward_channels=2 * dims),
        'model.backbone.img_size': canvas,
        'model.head.in_channels': dims,
        **{f'{split}_dataloader.dataset.canvas_size': canvas
           for split in ('train', 'val', 'test')},
    }


#: a reduced host: 4 layers (pruning before layer 3 stays possible), 32
#: dims, a 16x16 canvas (16 patches), a few samples, one epoch
REDUCED = {
    **_small_host(32, 16),
    'train_dataloader.dataset.max_samples': 32,
    'val_dataloader.dataset.max_samples': 16,
    'test_dataloader.dataset.max_samples': 24,
    'train_dataloader.batch_size': 16,
    'train_cfg.max_epochs': 1,
    'train_cfg.val_interval': 1,
    'param_scheduler': [dict(type='ConstantLR', factor=1.0)],
}


@pytest.fixture(scope='module')
def reduced(tmp_path_factory):
    cfg = load_config(osp.join(REPO, study.HOST_CONFIG), dict(REDUCED))
    cache = str(tmp_path_factory.mktemp('study_cache'))
    return cfg, cache, study.host_checkpoint(cfg, 0, cache)


def test_the_host_is_trained_once_and_cached_by_config_and_seed(
        reduced, monkeypatch):
    cfg, cache, ckpt = reduced
    assert osp.isfile(ckpt)

    def refuse(*args):
        raise AssertionError('trained again')

    monkeypatch.setattr(study.training, '_train', refuse)
    assert study.host_checkpoint(cfg, 0, cache) == ckpt
    with pytest.raises(AssertionError, match='trained again'):
        study.host_checkpoint(cfg, 1, cache)  # another seed, another key
    other = copy.deepcopy(cfg)
    other.optim_wrapper.optimizer.lr = 1e-4
    assert study.config_key(other, 0) != study.config_key(cfg, 0)
    with pytest.raises(FileNotFoundError, match='no cached host'):
        study.host_checkpoint(other, 0, cache, train=False)


def test_pruned_host_at_density_one_is_the_host(reduced):
    cfg, _, ckpt = reduced
    host = study.build_study_model(cfg, ckpt)
    x = torch.randn(3, 3, 16, 16)
    for scorer in study.REFERENCE_SCORERS:
        dense = study.pruned_host(cfg, ckpt, scorer, 1.0)
        torch.testing.assert_close(dense(x, mode='tensor'),
                                   host(x, mode='tensor'), rtol=0, atol=0)
        half = study.pruned_host(cfg, ckpt, scorer, 0.5)
        half(x, mode='tensor')
        # value selector: round(0.5 * 17) - 1 = 8 of 16 patches kept
        assert half.backbone.token_counts[0, -1].item() == 1 + 8


def test_reference_rows_measure_and_outputs(reduced, tmp_path):
    cfg, _, ckpt = reduced
    inputs = study.test_inputs(cfg, batch_size=8)
    assert sum(len(y) for _, y in inputs) == 24
    rows = study.reference_rows(cfg, ckpt, inputs, [0.25, 1.0], [0, 1])
    assert [r['method'] for r in rows] == ['host'] + [
        f'{s} pruning' for s in study.REFERENCE_SCORERS for _ in range(2)]
    by = {(r['method'], r['setting']): r for r in rows}
    host = by[('host', 'dense')]
    for s in study.REFERENCE_SCORERS:  # density 1: the host itself
        assert set(by[(f'{s} pruning', 'rho=1')]['per_seed']) == set(
            host['per_seed'])
    tis = by[('tis pruning', 'rho=0.25')]
    assert tis['top1_std'] == 0. and tis['num_seeds'] == 1  # deterministic
    assert by[('random pruning', 'rho=0.25')]['num_seeds'] == 2
    study.measure(rows, inputs, rounds=1, batch_size=4)
    assert host['speed_ratio'] == 1. and host['flops_ratio'] == 1.
    pruned = by[('tis pruning', 'rho=0.25')]
    assert pruned['mflops'] < host['mflops']
    assert pruned['params'] == host['params']
    path = tmp_path / 'study.csv'
    study.write_csv(rows, str(path))
    with open(path) as f:
        table = list(csv.DictReader(f))
    assert tuple(table[0]) == study.FIELDS and len(table) == len(rows)
    study.plot_tradeoff(rows, str(tmp_path / 'a.png'))
    assert (tmp_path / 'a.png').stat().st_size > 1000


def test_the_command_writes_csv_and_plots(reduced, tmp_path, capsys):
    cfg, cache, _ = reduced
    sys.path.insert(0, osp.join(REPO, 'tools', 'analysis'))
    try:
        import tradeoff_study
    finally:
        sys.path.pop(0)
    options = [f'{k}={v}' for k, v in REDUCED.items()
               if k not in ('model.backbone.arch', 'param_scheduler')]
    options += [
        'model.backbone.arch.embed_dims=32',
        'model.backbone.arch.num_layers=4', 'model.backbone.arch.num_heads=2',
        'model.backbone.arch.feedforward_channels=64'
    ]
    with pytest.raises(SystemExit) as refused:  # one line, code 2
        tradeoff_study.main(['--methods', 'nope'])
    assert refused.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(
        "unknown methods ['nope']")
    out = tmp_path / 'out'
    rows = tradeoff_study.main([
        '--work-dir', str(tmp_path / 'cache'), '--out', str(out),
        '--densities', '0.5', '--seeds', '0', '--rounds', '1',
        '--speed-batch', '4', '--cfg-options', *options
    ])
    assert len(rows) == 1 + len(study.REFERENCE_SCORERS)
    for name in ('study.csv', 'accuracy_vs_flops.png',
                 'accuracy_vs_speed.png'):
        assert (out / name).is_file()
    assert 'wrote' in capsys.readouterr().out
    # the plots drawn again from the written CSV, nothing else run
    again = tmp_path / 'again'
    tradeoff_study.main(['--plot', str(out / 'study.csv'), '--out',
                         str(again)])
    assert sorted(p.name for p in again.iterdir()) == [
        'accuracy_vs_flops.png', 'accuracy_vs_speed.png']


def test_a_method_entry_refuses_an_unknown_init():
    with pytest.raises(ValueError, match='init'):
        study.StudyMethod(config='x.py', init='imagenet')


def test_the_methods_file_loads_and_bad_entries_are_refused():
    methods = study.load_methods(osp.join(REPO, study.METHODS_FILE))
    assert list(methods) == ['STViT-DeiT', 'SaiT', 'AS-ViT',
                             'Integrated-DeiT',
                             'Integrated-DeiT, paper layout', 'ToMe',
                             'cls pruning, fine-tuned',
                             'cls prune and merge, fine-tuned',
                             'hMHSA + cFFN']
    for m in methods.values():
        assert osp.isfile(osp.join(REPO, m.config)), m.config
    assert methods['Integrated-DeiT'].init == 'dgssa_init'
    assert methods['Integrated-DeiT'].search['tool'] == \
        'tools/glad_search.py'
    assert methods['hMHSA + cFFN'].fold['tool'] == 'tools/reparameterize.py'
    with pytest.raises(ValueError, match='dgssa_options'):
        study.StudyMethod(config='x.py', init='dgssa_init')
    with pytest.raises(ValueError, match='fold'):
        study.StudyMethod(config='x.py', fold=dict(tool='t.py'))
    with pytest.raises(ValueError, match='search'):
        study.StudyMethod(config='x.py', search=dict(tool='t.py'))
    with pytest.raises(ValueError, match='scratch'):
        study.StudyMethod(config='x.py', init='scratch',
                          search=dict(tool='t.py', args=()))


def test_a_search_output_becomes_options_and_labels(tmp_path):
    path = tmp_path / 'layout.json'
    path.write_text('{"cfg_options": {"model.backbone.glad_layers": [3, 9],'
                    ' "model.backbone.glad_tokens": [27, 26]}}')
    options = study.read_search(str(path))
    assert options == {'model.backbone.glad_layers': (3, 9),
                       'model.backbone.glad_tokens': (27, 26)}
    assert study.setting_label('GLAD {glad_layers} to {glad_tokens}',
                               options) == 'GLAD 3/9 to 27/26'
    assert study.setting_label('plain', {}) == 'plain'
    path.write_text('{"layers": [3]}')
    with pytest.raises(ValueError, match='cfg_options'):
        study.read_search(str(path))


def test_a_scratch_method_gets_no_host_weights(monkeypatch, tmp_path):
    seen = {}

    def fake_train(cfg, work_dir, seed):
        seen['load_from'] = cfg.get('load_from')
        return osp.join(work_dir, 'final.pth')

    monkeypatch.setattr(study.training, '_train', fake_train)
    for init, expected in (('scratch', None), ('host', 'HOST.pth')):
        method = study.StudyMethod(config=study.HOST_CONFIG, name=init,
                                   init=init)
        study.method_checkpoint(method, 'HOST.pth', 0, str(tmp_path), REPO)
        assert seen['load_from'] == expected, init


#: the reduced host's architecture for the methods' configs
_SMALL = dict(embed_dims=32, num_layers=4, num_heads=2,
              feedforward_channels=64)
_SMALL_DATA = {k: v for k, v in REDUCED.items()
               if k.split('.')[0].endswith('dataloader')}
_SMALL_DATA.update({'model.backbone.img_size': 16,
                    'model.head.in_channels': 32,
                    'train_cfg.max_epochs': 1, 'train_cfg.val_interval': 1})


def _small_entries():
    """hMHSA + cFFN (host loader, fold) and Integrated-DeiT (DGSSA init
    from the host, GLAD) on the reduced host."""
    hvit = dict(
        name='hMHSA + cFFN', setting='folded',
        config='configs/study/hvit_digits.py',
        cfg_options={'model.backbone.arch': dict(_SMALL), **_SMALL_DATA},
        host_options=('model.backbone.init_cfg.checkpoint',
                      'model.head.init_cfg.checkpoint'),
        fold=dict(tool='tools/reparameterize.py',
                  args=('--check-shape', '2', '3', '16', '16'),
                  test_options={'model.backbone.deploy': True,
                                'model.backbone.init_cfg': None,
                                'model.head.init_cfg': None}))
    integrated = dict(
        name='Integrated-DeiT', setting='DGSSA 1, GLAD 3',
        settings={'DGSSA 1, GLAD {glad_layers} to {glad_tokens}': {}},
        config='configs/study/integrated_deit_digits.py',
        cfg_options={
            'model.backbone.arch': dict(_SMALL),
            'model.backbone.static_layers': (1, ),
            'model.backbone.glad_layers': (3, ),
            'model.backbone.glad_tokens': (6, ),
            'model.teacher.arch': dict(_SMALL),
            'model.teacher.img_size': 16,
            'model.teacher_head.in_channels': 32, **_SMALL_DATA},
        init='dgssa_init',
        host_options=('load_from', 'model.teacher_checkpoint',
                      'model.teacher_head.init_cfg.checkpoint'),
        dgssa_options=('model.backbone.init_cfg.checkpoint', ),
        dgssa_init_args=('--num-images', '8', '--batch-size', '8'),
        # one GLAD layer, searched on the host
        search=dict(tool='tools/glad_search.py',
                    args=('--num-images', '8', '--batch-size', '8',
                          '--static-depth', '1', '--max-glad', '1',
                          '--eta', '0.9')))
    return {e['name']: study.StudyMethod(**e) for e in (hvit, integrated)}


@pytest.mark.slow
def test_trained_methods_start_from_the_host_fold_and_are_cached(
        reduced, monkeypatch):
    cfg, cache, ckpt = reduced
    methods = _small_entries()
    inputs = study.test_inputs(cfg, batch_size=8)
    rows = study.trained_rows(methods, ckpt, inputs, [0], cache, REPO)
    # the searched layout is in the label and is what was trained
    layout = [p for p in os.listdir(cache)
              if p.startswith('Integrated_DeiT_search') and
              p.endswith('.json')]
    assert len(layout) == 1
    searched = study.read_search(osp.join(cache, layout[0]))
    (glad, ), (tokens, ) = (searched['model.backbone.glad_layers'],
                            searched['model.backbone.glad_tokens'])
    assert 1 < glad < 4 and 1 < tokens < 17
    assert [(r['method'], r['setting']) for r in rows] == [
        ('hMHSA + cFFN', 'folded'),
        ('Integrated-DeiT', f'DGSSA 1, GLAD {glad} to {tokens}')]
    integrated = rows[1]['build']()
    assert integrated.backbone.glad_layers == [glad]
    for r in rows:
        assert 0 <= r['top1_mean'] <= 1 and r['num_seeds'] == 1
    # the fold ran (the deploy form loads its checkpoint strictly) and the
    # DGSSA init ran on the host
    hvit_ckpt, options = study.method_checkpoint(methods['hMHSA + cFFN'],
                                                 ckpt, 0, cache, REPO)
    assert hvit_ckpt.endswith('folded.pth')
    assert options['model.backbone.deploy'] is True
    folded = torch.load(hvit_ckpt, map_location='cpu')
    assert folded['meta']['deploy'] is True
    assert len(list(
        p for p in os.listdir(cache) if p.startswith('Integrated_DeiT_dgssa')
        and p.endswith('.pth'))) == 1
    # a second study reuses everything
    def refuse(*args, **kwargs):
        raise AssertionError('ran again')

    monkeypatch.setattr(study.training, '_train', refuse)
    monkeypatch.setattr(study.training, 'run_tool', refuse)
    again = study.trained_rows(methods, ckpt, inputs, [0], cache, REPO)
    assert [r['per_seed'] for r in again] == [r['per_seed'] for r in rows]
    with pytest.raises(AssertionError, match='ran again'):
        study.trained_rows(methods, ckpt, inputs, [1], cache, REPO)
    # another seed trains again but reuses the host's DGSSA initialisation
    # and searched layout
    monkeypatch.setattr(study.training, 'run_tool', refuse)
    monkeypatch.setattr(study.training, '_train',
                        lambda cfg, work_dir, seed: osp.join(work_dir, 'x'))
    study.method_checkpoint(methods['Integrated-DeiT'], ckpt, 1, cache, REPO)


#: a host that trains in about 40 s here and is good enough for its
#: attention to matter (the test asserts over 80% test top-1; 15 epochs
#: reach 0.90, 10 only 0.81): 4 layers, 48 dims, a 24x24 canvas (36
#: patches), 15 epochs of 4 canvases per scan
TRAINED = {
    **_small_host(48, 24),
    'model.backbone.drop_path_rate': 0.,
    'test_dataloader.dataset.max_samples': 360,
    'train_cfg.max_epochs': 15,
    'train_cfg.val_interval': 15,
    'default_hooks.logger.interval': 1000,
}


@pytest.mark.slow
def test_reduced_study_scorers_beat_random_pruning(tmp_path):
    """The study in small: a host trained here, pruned before layer 2 to a
    density of 0.3 without training. TIS and class attention must keep the
    host's accuracy and beat random pruning (five seeds) by far more than
    its spread over seeds; a scorer that ranks tokens no better than
    chance, or a pruned path that ignores the kept tokens, fails."""
    cfg = load_config(osp.join(REPO, study.HOST_CONFIG), dict(TRAINED))
    ckpt = study.host_checkpoint(cfg, 0, str(tmp_path))
    inputs = study.test_inputs(cfg)
    rows = study.reference_rows(cfg, ckpt, inputs, [0.3], [0, 1, 2, 3, 4],
                                prune_before=(2, ))
    by = {r['method']: r for r in rows}
    host = by['host']['top1_mean']
    assert host > 0.8, 'the host did not train'
    random = by['random pruning']
    assert random['num_seeds'] == 5 and random['top1_std'] > 0
    floor = random['top1_mean'] + max(5 * random['top1_std'], 0.08)
    for scorer in ('tis', 'cls'):
        kept = by[f'{scorer} pruning']['top1_mean']
        assert kept > floor, (scorer, kept, random['per_seed'])
        assert kept > host - 0.04, (scorer, kept, host)


def test_the_training_record_keeps_every_steps_gradient_norm(reduced):
    cfg, _, ckpt = reduced
    record = study.train_record(ckpt)
    # 32 canvases x 4 repeats at batch 16, one epoch
    assert record['steps'] == len(record['grad_norms']) == 8
    assert record['max_grad_norm'] == max(record['grad_norms']) > 0
    assert study.train_record(osp.join('nowhere', 'final.pth')) == {}


def test_the_training_record_is_this_runs_alone(reduced, tmp_path):
    """mmengine shares a message hub between runners of one experiment name
    (the config file's name and the second the run started): a run started
    in the same second as another one, in one process, must not record the
    other's gradient norms."""
    import time

    from mmengine.logging import MessageHub
    cfg, _, _ = reduced
    name = osp.splitext(osp.basename(cfg.filename))[0]
    now = time.time()
    for second in range(-5, 600):  # every name this run could take
        stamp = time.strftime('%Y%m%d_%H%M%S', time.localtime(now + second))
        MessageHub.get_instance(f'{name}_{stamp}').update_scalar(
            'train/grad_norm', 1e6)
    study.training._train(cfg, str(tmp_path), 0)
    record = study.train_record(osp.join(str(tmp_path), 'final.pth'))
    assert record['steps'] == len(record['grad_norms']) == 8
    assert record['max_grad_norm'] < 1e6


def test_flops_of_an_image_dependent_model_are_the_test_split_mean(reduced):
    """The mass selector keeps a different count per image: the FLOPs are
    the mean of each image's own count (by the one counter), not the first
    image's; the value selector's are the same for every image."""
    from mmvitaccel.analysis.flops import count_flops
    cfg, _, ckpt = reduced
    images = torch.cat([x for x, _ in study.test_inputs(cfg, 12, 4)])
    fixed = study.pruned_host(cfg, ckpt, 'tis', 0.5)
    flops, varies = study.test_split_flops(fixed, images)
    assert not varies
    assert flops == count_flops(fixed, images[:1], dict(mode='tensor')).total
    # ToMe merges as many tokens in every image (its counts are a list)
    from mmvitaccel.switch import accelerate_config
    tome = study.build_study_model(accelerate_config(cfg, 'tome', r=2), ckpt)
    flops, varies = study.test_split_flops(tome, images)
    assert not varies and tome.backbone.token_counts == [17, 15, 13, 11]
    assert flops == count_flops(tome, images[:1], dict(mode='tensor')).total
    adaptive = study.pruned_host(cfg, ckpt, 'tis', 0.5)
    adaptive.backbone.selector = 'mass'
    adaptive.backbone.set_pruning(mass_threshold=0.6)
    # a barely trained host attends almost evenly, so that TIS keeps the
    # same count everywhere: sharpen its class attention
    adaptive.backbone._score = lambda attn, context, policy: (
        1e3 * attn[:, :, 0, 1:].mean(1)).softmax(-1)
    each = [count_flops(adaptive, images[i:i + 1], dict(mode='tensor')).total
            for i in range(len(images))]
    assert len(set(each)) > 1, 'the images keep the same count'
    flops, varies = study.test_split_flops(adaptive, images)
    assert varies and flops == sum(each) / len(each)
    # measure() reports it, averaged over the row's seeds (here one model
    # twice), beside the host's fixed count
    inputs = study.test_inputs(cfg, 12, 4)
    rows = [dict(method='host', setting='dense', build=lambda: fixed),
            dict(method='m', setting='s', build=lambda: adaptive,
                 seed_builds=[lambda: adaptive] * 2)]
    study.measure(rows, inputs, rounds=1, batch_size=4, iters_per_round=1)
    assert rows[1]['mflops'] == flops / 1e6
    assert [r['flops_per_image'] for r in rows] == ['fixed', 'test mean']


def test_the_short_table_shows_a_preferred_setting_only_when_it_earns_it(
        tmp_path):
    def rows(speed, top1):
        return [dict(method='host', setting='dense', speed_ratio=1.,
                     top1_mean=0.96),
                dict(method='M', setting='pad', speed_ratio=1.0,
                     top1_mean=0.950),
                dict(method='M', setting='mean', speed_ratio=speed,
                     top1_mean=top1)]

    prefer = {'M': dict(setting='mean', over='pad', within=0.003)}
    for speed, top1, shown in [(1.3, 0.948, 'mean'), (1.3, 0.946, 'pad'),
                               (0.9, 0.960, 'pad')]:
        marked = study.choose_summary(rows(speed, top1), prefer)
        assert [r['setting'] for r in marked if r['summary']] == [
            'dense', shown]
    full = dict(params=1, mflops=2.5, flops_ratio=0.5, top1_std=0.01,
                num_seeds=3, speed_ratio_q1=1., speed_ratio_q3=1.)
    written = [{**r, **full} for r in marked]
    written[2].update(flops_per_image='test mean', max_grad_norm=12.5)
    path = str(tmp_path / 'study.csv')
    study.write_csv(written, path)
    back = study.read_csv(path)
    assert [r['summary'] for r in back] == [1, 1, 0]
    assert back[0]['max_grad_norm'] is None
    assert back[2]['max_grad_norm'] == 12.5
    table = study.markdown_table(back, references=False)
    assert '| M | pad |' in table and '| M | mean |' not in table
    assert '2.50* (0.50)' in study.markdown_table(back)


def test_a_preference_must_name_two_settings():
    with pytest.raises(ValueError, match='prefer'):
        study.StudyMethod(config='x.py', settings={'a': {}},
                          prefer=dict(setting='a', over='b', within=0.1))


def test_the_training_free_table_runs_the_switch_on_the_host(reduced,
                                                            tmp_path):
    """The training-free table's DeiT rows are the switch's conversions of
    the host with its weights unchanged: keeping every token is the host
    (its top-1, its FLOPs), keeping half costs less; the dense evidence's
    training-free rows follow their dense models, in points; the CSV
    reads back to the same table."""
    from projects.digits_study.study import training_free
    cfg, _, ckpt = reduced
    inputs = study.test_inputs(cfg, batch_size=8)
    settings = [
        ('tis', 'value, density 1', dict(selector='value', density=1.0)),
        ('cls', 'value, density 0.5', dict(selector='value', density=0.5)),
    ]
    other = copy.deepcopy(cfg)
    other.test_dataloader.dataset.canvas_seed = 7
    others = {7: study.test_inputs(other, batch_size=8)}
    assert not torch.equal(others[7][0][0], inputs[0][0])
    rows = training_free.deit_rows(cfg, ckpt, inputs, settings, rounds=1,
                                   batch_size=8, other_canvases=others)
    host, full, half = rows
    # the top-1 on each canvas seed, the test split's own first
    assert host['metric'] == 'top-1, canvas seed 0 / 7'
    assert host['value'] == ' / '.join(
        f'{100 * study.top1(study.build_study_model(cfg, ckpt), x):.1f}'
        for x in (inputs, others[7]))
    assert full['value'] == host['value'] and \
        full['change'] == '+0.0 / +0.0'
    assert full['flops_ratio'] == pytest.approx(1.0, rel=0.02)
    assert half['flops_ratio'] < 0.95
    dense = [
        dict(task='detection', method='Swin', setting='fine-tuned',
             reference=None, bbox_ap=0.6, segm_ap=0.62, flops_ratio=1.,
             model_speed_b1=1., model_speed_b8=1.),
        dict(task='detection', method='STViT-R', setting='training-free',
             reference='Swin', bbox_ap=0.58, segm_ap=0.615, flops_ratio=0.8,
             model_speed_b1=1.1, model_speed_b8=1.2),
    ]
    rows += training_free.dense_rows(dense)
    assert rows[-1]['value'] == '58.0 / 61.5'
    assert rows[-1]['change'] == '−2.0 / −0.5'
    path = str(tmp_path / 'training_free.csv')
    training_free.write_rows(rows, path)
    # the CSV keeps four digits: its table is that of the rows so rounded
    # (a timed ratio on a rounding boundary, e.g. 0.97496, renders 0.97
    # from the row and 0.98 from the CSV's 0.9750)
    rounded = [{k: round(v, 4) if isinstance(v, float) else v
                for k, v in r.items()} for r in rows]
    assert training_free.markdown_table(training_free.read_rows(path)) == \
        training_free.markdown_table(rounded)
