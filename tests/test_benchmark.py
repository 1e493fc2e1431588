"""Tests of the interleaved benchmark (mmvitaccel.analysis.timing) and its
CLI tools/analysis/benchmark.py."""
import json
import os.path as osp
import subprocess
import sys

import pytest
import torch

from mmvitaccel.analysis.timing import (BenchmarkResult, RatioStats,
                                        interleaved_benchmark)

from .tolerance import rounding_tol

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


class FakeClock:
    """A clock that only moves when a fake callable says so."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def work(self, seconds):
        self.now += seconds


def _fakes(clock, costs, calls):
    """Callables that record their calls and advance the clock."""

    def make(name):

        def fn():
            calls.append(name)
            cost = costs[name]
            clock.work(cost() if callable(cost) else cost)

        return fn

    return {name: make(name) for name in costs}


def test_order_alternates_and_warmup():
    clock, calls = FakeClock(), []
    fns = _fakes(clock, {'base': 1.0, 'cand': 0.5}, calls)
    res = interleaved_benchmark(fns,
                                rounds=4,
                                iters_per_round=3,
                                warmup=2,
                                clock=clock)
    # warm-up alternates call by call, then blocks of 3 alternate by round
    assert calls[:4] == ['base', 'cand', 'base', 'cand']
    timed = calls[4:]
    assert timed == (['base'] * 3 + ['cand'] * 3) * 4
    assert res.order == ['base', 'cand'] * 4
    assert len(res.throughput['base']) == len(res.throughput['cand']) == 4


def test_three_callables_round_robin():
    clock, calls = FakeClock(), []
    fns = _fakes(clock, {'a': 1.0, 'b': 2.0, 'c': 4.0}, calls)
    res = interleaved_benchmark(fns,
                                rounds=2,
                                iters_per_round=1,
                                warmup=0,
                                clock=clock)
    assert calls == ['a', 'b', 'c', 'a', 'b', 'c']
    assert res.baseline == 'a'
    # dyadic costs: every clock reading, block length, throughput and ratio
    # is exact in binary floating point (Python floats, any CPU)
    assert res.speedup['b'].median == 0.5
    assert res.speedup['c'].median == 0.25


def test_ratio_and_spread_with_injected_clock():
    clock, calls = FakeClock(), []
    # the machine slows down in round 2 (both sides), and the candidate is
    # always exactly twice as fast within a round
    base_costs = iter([1.0, 1.0, 3.0, 1.0, 1.0])
    cand_costs = iter([0.5, 0.5, 1.5, 0.25, 0.5])
    fns = _fakes(
        clock, {
            'baseline': lambda: next(base_costs),
            'candidate': lambda: next(cand_costs)
        }, calls)
    res = interleaved_benchmark(fns,
                                rounds=5,
                                iters_per_round=1,
                                warmup=0,
                                items_per_call=8,
                                baseline='baseline',
                                clock=clock)
    # dyadic costs: the clock's readings and the block lengths are exact,
    # a throughput is one correctly rounded division (8 / 3 as Python's),
    # fl(16 / 3) = 2 fl(8 / 3), and the quartiles interpolate equal values:
    # all exact
    assert res.throughput['baseline'] == [8.0, 8.0, 8 / 3, 8.0, 8.0]
    assert res.throughput['candidate'] == [16.0, 16.0, 16 / 3, 32.0, 16.0]
    assert res.median == {'baseline': 8.0, 'candidate': 16.0}
    assert res.ratios['candidate'] == [2, 2, 2, 4, 2]
    s = res.speedup['candidate']
    assert (s.median, s.q1, s.q3, s.min, s.max) == (2.0, 2.0, 2.0, 2.0, 4.0)
    assert 'baseline' not in res.ratios
    table = res.format()
    assert 'candidate' in table and '2.000' in table


def test_iters_per_round_timed_as_block():
    clock, calls = FakeClock(), []
    fns = _fakes(clock, {'x': 0.1, 'y': 0.4}, calls)
    res = interleaved_benchmark(fns,
                                rounds=3,
                                iters_per_round=5,
                                warmup=1,
                                clock=clock)
    # 0.1 is not binary: the clock's readings are sums of up to k = 32
    # costs (error gamma_k T, T = 8 s in all), a block's length is the
    # difference of two (relative error 2 gamma_k T / 0.5 s), and a
    # throughput, a ratio and a median add a few roundings
    rel = rounding_tol(torch.float64, 32 + 4, 8.0 / 0.5)
    assert res.throughput['x'] == pytest.approx([10.0] * 3, rel=rel, abs=0)
    assert res.throughput['y'] == pytest.approx([2.5] * 3, rel=rel, abs=0)
    assert res.speedup['y'].median == pytest.approx(0.25, rel=2 * rel,
                                                    abs=0)


def test_ratio_stats():
    s = RatioStats.of([1.0, 3.0, 2.0])
    assert (s.median, s.min, s.max) == (2.0, 1.0, 3.0)
    # linear-interpolation quartiles, as numpy's default
    s = RatioStats.of([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (s.q1, s.q3) == (2.0, 4.0)
    s = RatioStats.of([1.0, 2.0])
    assert (s.q1, s.q3) == (1.25, 1.75)  # (3 + 2) / 4, (1 + 6) / 4: exact
    assert RatioStats.of([1.5]).q1 == 1.5


def test_result_json_roundtrip(tmp_path):
    clock, calls = FakeClock(), []
    fns = _fakes(clock, {'a': 1.0, 'b': 0.5}, calls)
    res = interleaved_benchmark(fns,
                                rounds=2,
                                iters_per_round=1,
                                warmup=0,
                                clock=clock,
                                settings=dict(threads=1))
    out = tmp_path / 'sub' / 'r.json'
    res.dump(str(out))
    data = json.loads(out.read_text())
    assert data['settings']['threads'] == 1
    assert data['speedup']['b']['median'] == 2.0  # 1 / 0.5: exact
    assert isinstance(res, BenchmarkResult)


def test_bad_arguments():
    with pytest.raises(ValueError):
        interleaved_benchmark({})
    with pytest.raises(KeyError):
        interleaved_benchmark({'a': lambda: None}, baseline='b', rounds=1)


TINY_VIT = """_base_ = 'mmpretrain::deit/deit-small_4xb256_in1k.py'
model = dict(
    backbone=dict(arch=dict(_delete_=True, embed_dims={dim},
                            num_layers={layers},
                            num_heads=2, feedforward_channels={ffn}),
                  img_size=64),
    head=dict(in_channels={dim}))
"""


def _tiny_configs(tmp_path):
    base = tmp_path / 'base.py'
    base.write_text(TINY_VIT.format(dim=64, layers=2, ffn=128))
    cand = tmp_path / 'cand.py'
    cand.write_text(TINY_VIT.format(dim=32, layers=1, ffn=64))
    return str(cand), str(base)


@pytest.mark.slow
def test_cli_end_to_end(tmp_path):
    cand, base = _tiny_configs(tmp_path)
    out = tmp_path / 'bench.json'
    cmd = [
        sys.executable,
        osp.join(REPO, 'tools', 'analysis',
                 'benchmark.py'), cand, '--baseline', base, '--shape', '64',
        '64', '--rounds', '2', '--iters-per-round', '1', '--warmup', '1',
        '--threads', '1', '--batch-size', '2', '--out',
        str(out)
    ]
    proc = subprocess.run(cmd,
                          cwd=REPO,
                          capture_output=True,
                          text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'speed-up' in proc.stdout and 'candidate' in proc.stdout
    (data, ) = json.loads(out.read_text())['results']
    assert data['order'] == ['baseline', 'candidate'] * 2
    assert data['settings']['threads'] == 1
    assert data['settings']['inputs']['candidate'] == '2x3x64x64'
    assert len(data['ratios']['candidate']) == 2
    assert data['speedup']['candidate']['median'] > 0


def test_cli_model_part_in_process(tmp_path):
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        'bench_cli', osp.join(REPO, 'tools', 'analysis', 'benchmark.py'))
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    cand, base = _tiny_configs(tmp_path)
    res = cli.main([
        cand, '--baseline', base, '--part', 'model', '--shape', '64',
        '--rounds', '1', '--iters-per-round', '1', '--warmup', '0',
        '--threads', '1', '--batch-size', '1'
    ])
    (res, ) = res
    assert res.names == ['baseline', 'candidate']
    assert res.settings['part'] == 'model'
    assert all(v > 0 for v in res.median.values())


def test_cli_default_batch_sizes_one_run(tmp_path):
    """One run measures batch 1 and batch 32 by default (the peers'
    conventions), with the models built once."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        'bench_cli', osp.join(REPO, 'tools', 'analysis', 'benchmark.py'))
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    assert cli.parse_args(['c.py', '--baseline', 'b.py']).batch_size == [1, 32]
    cand, base = _tiny_configs(tmp_path)
    out = tmp_path / 'bench.json'
    res = cli.main([
        cand, '--baseline', base, '--shape', '32', '32', '--rounds', '1',
        '--iters-per-round', '1', '--warmup', '0', '--threads', '1',
        '--batch-size', '1', '3', '--out',
        str(out)
    ])
    assert [r.settings['batch_size'] for r in res] == [1, 3]
    assert [r.settings['inputs']['candidate'] for r in res] == [
        '1x3x32x32', '3x3x32x32'
    ]
    data = json.loads(out.read_text())['results']
    assert [d['settings']['batch_size'] for d in data] == [1, 3]
    with pytest.raises(ValueError, match='--batch-size'):
        cli.main([cand, '--baseline', base, '--batch-size', '0'])


def test_cli_baseline_only_options(tmp_path, monkeypatch):
    """``--baseline-cfg-options`` changes the baseline only, after
    ``--cfg-options`` (which both get): a config against itself with one
    switch off. The result records them."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        'bench_cli', osp.join(REPO, 'tools', 'analysis', 'benchmark.py'))
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    built = []

    def runner(cfg, checkpoint, args):  # records the config, times nothing
        built.append(cfg)
        return (lambda batch_size: (lambda: sum(range(1000)), 'x')), \
            'mmpretrain'

    monkeypatch.setattr(cli, 'make_runner', runner)
    cand, _ = _tiny_configs(tmp_path)
    res, = cli.main([
        cand, '--baseline', cand, '--cfg-options', 'model.head.num_classes=7',
        'model.backbone.drop_path_rate=0.2', '--baseline-cfg-options',
        'model.backbone.drop_path_rate=0.0', '--rounds', '1',
        '--iters-per-round', '1', '--warmup', '0', '--batch-size', '1'
    ])
    baseline, candidate = built
    assert baseline.model.head.num_classes == 7 == \
        candidate.model.head.num_classes
    assert candidate.model.backbone.drop_path_rate == 0.2
    assert baseline.model.backbone.drop_path_rate == 0.0
    assert res.settings['baseline_cfg_options'] == {
        'model.backbone.drop_path_rate': 0.0}


def test_torch_op_profile_finds_the_products():
    """Self time by operator: the matrix product dominates a product-heavy
    call, shares sum to one, calls and multiply-adds are per call."""
    from mmvitaccel.analysis.timing import torch_op_profile
    a = torch.randn(256, 256)
    # one thread: on a loaded machine an OpenMP barrier may wait for a
    # descheduled worker for milliseconds, in the relu as well as the
    # product, and the ranking below would measure the scheduler
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = torch_op_profile(lambda: (a @ a).relu(), runs=3)
    finally:
        torch.set_num_threads(threads)
    ops = {op: (calls, macs) for op, _, _, calls, macs in result['ops']}
    assert ops['aten::mm'] == (1, 256**3)  # multiply-adds per call
    assert ops['aten::relu'] == (1, 0)
    # a timing ranking, not a rounding comparison: 256^3 multiply-adds
    # against 256^2 clamps
    assert result['ops'][0][0] == 'aten::mm'
    # k shares t_i / sum t (the sum: gamma_k relative), summed again
    k = len(result['ops'])
    assert abs(sum(share for _, _, share, *_ in result['ops']) - 1) <= \
        rounding_tol(torch.float64, 2 * k + 1)
    assert 0 < result['op_seconds_per_call']
    assert result['seconds_per_call'] > 0
    with pytest.raises(ValueError, match='runs must be'):
        torch_op_profile(lambda: None, runs=0)


def test_profile_tool_eager(capsys):
    """tools/analysis/profile_ops.py --runtime eager on DeiT-T's backbone
    at 32x32 and batch 2: its products and layer norms by self time."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        'profile_ops', osp.join(REPO, 'tools', 'analysis', 'profile_ops.py'))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    result = tool.main([
        osp.join(REPO, 'configs/_base_/deit_s_in1k.py'), '--shape', '32',
        '32', '--batch-size', '2', '--runs', '2', '--threads', '1',
        '--cfg-options', 'model.backbone.arch=deit-tiny',
        'model.backbone.img_size=32'
    ])
    ops = {op for op, *_ in result['ops']}
    assert {'aten::addmm', 'aten::native_layer_norm'} <= ops
    text = capsys.readouterr().out
    assert 'input (2, 3, 32, 32)' in text and 'mean of 2 calls' in text
