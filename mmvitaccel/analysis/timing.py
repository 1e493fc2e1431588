# Copyright (c) mmvitaccel contributors. All rights reserved.
"""Interleaved speed benchmark: callables alternate round by round, and a
speed-up is the median of per-round throughput ratios (docs/benchmarks.md).
"""
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

__all__ = [
    'RatioStats', 'BenchmarkResult', 'interleaved_benchmark',
    'default_num_threads', 'torch_op_profile'
]


@dataclass
class RatioStats:
    """Summary of per-round ratios ``candidate / baseline`` of throughputs.

    Attributes:
        median (float): Median of the per-round ratios (the speed-up).
        q1 (float): First quartile.
        q3 (float): Third quartile.
        min (float): Smallest per-round ratio.
        max (float): Largest per-round ratio.
    """
    median: float
    q1: float
    q3: float
    min: float
    max: float

    @classmethod
    def of(cls, ratios: Sequence[float]) -> 'RatioStats':
        """Summarise a non-empty list of ratios.

        Args:
            ratios (Sequence[float]): Per-round ratios.
        """
        if len(ratios) > 1:  # numpy's default (linear) quantiles
            q1, _, q3 = statistics.quantiles(ratios, n=4, method='inclusive')
        else:
            q1 = q3 = ratios[0]
        return cls(statistics.median(ratios), q1, q3, min(ratios),
                   max(ratios))


@dataclass
class BenchmarkResult:
    """Result of :func:`interleaved_benchmark`.

    Attributes:
        names (list[str]): Names of the callables, in run order.
        baseline (str): Name that the ratios are relative to.
        throughput (dict[str, list[float]]): Items per second, per round.
        median (dict[str, float]): Median of ``throughput`` per name.
        ratios (dict[str, list[float]]): Per-round ratios to the baseline.
        speedup (dict[str, RatioStats]): Summary of ``ratios`` per name.
        order (list[str]): The names of the timed blocks, in run order.
        settings (dict): Rounds, iterations, warm-up, items per call and
            the caller's entries.
    """
    names: List[str]
    baseline: str
    throughput: Dict[str, List[float]]
    median: Dict[str, float]
    ratios: Dict[str, List[float]]
    speedup: Dict[str, RatioStats]
    order: List[str]
    settings: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """A JSON-serialisable dict of the result."""
        return asdict(self)

    def dump(self, path: str) -> None:
        """Write the result as JSON.

        Args:
            path (str): Output file.
        """
        dirname = os.path.dirname(os.path.abspath(path))
        os.makedirs(dirname, exist_ok=True)
        with open(path, 'w') as f:
            json.dump(self.to_dict(), f, indent=2)

    def format(self, unit: str = 'img/s') -> str:
        """A plain-text table of medians and speed-ups.

        Args:
            unit (str): Unit of throughput shown in the header.
        """
        width = max(len(n) for n in self.names)
        lines = [
            f'{"name":<{width}}  {"median " + unit:>14}  {"speed-up":>9}  '
            f'{"IQR of per-round ratios":>24}  {"min-max":>13}'
        ]
        for name in self.names:
            row = f'{name:<{width}}  {self.median[name]:>14.2f}'
            if name == self.baseline:
                row += f'  {"1.000":>9}  {"(baseline)":>24}'
            else:
                s = self.speedup[name]
                row += (f'  {s.median:>9.3f}  {s.q1:>11.3f} - {s.q3:<10.3f}'
                        f'  {s.min:>5.3f} - {s.max:<5.3f}')
            lines.append(row)
        rounds = self.settings.get('rounds')
        lines.append(f'({rounds} interleaved rounds; speed-up = median of '
                     f'per-round {unit} ratios vs "{self.baseline}")')
        return '\n'.join(lines)


def default_num_threads() -> int:
    """The number of CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def torch_op_profile(fn: Callable[[], Any], runs: int = 10) -> Dict:
    """Self CPU time of eager PyTorch by operator, for one call of ``fn``.

    One untimed call, ``runs`` timed (``seconds_per_call``), ``runs``
    profiled; ``1 - op_seconds_per_call / seconds_per_call`` is the time
    outside operators (Python, dispatch, profiler). ``macs`` are our
    multiply-adds (half the profiler's FLOPs).

    Args:
        fn (Callable): one call of the model.
        runs (int): timed and profiled calls. Defaults to 10.

    Returns:
        dict: ``{'seconds_per_call', 'op_seconds_per_call', 'ops': [(op,
        seconds, share, calls, macs)]}``, by falling self time, per call.
    """
    from torch.profiler import ProfilerActivity, profile
    if runs < 1:
        raise ValueError(f'runs must be >= 1, got {runs}')
    fn()
    start = time.perf_counter()
    for _ in range(runs):
        fn()
    per_call = (time.perf_counter() - start) / runs
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        for _ in range(runs):
            fn()
    ops = [(e.key, e.self_cpu_time_total / 1e6 / runs, e.count / runs,
            (e.flops or 0) / 2 / runs) for e in prof.key_averages()
           if e.self_cpu_time_total > 0]
    whole = sum(t for _, t, _, _ in ops) or 1.
    return dict(seconds_per_call=per_call,
                op_seconds_per_call=whole,
                ops=sorted(((op, t, t / whole, n, m) for op, t, n, m in ops),
                           key=lambda r: -r[1]))


def interleaved_benchmark(fns: Dict[str, Callable[[], Any]],
                          rounds: int = 10,
                          iters_per_round: int = 5,
                          warmup: int = 2,
                          items_per_call: int = 1,
                          baseline: Optional[str] = None,
                          clock: Callable[[], float] = time.perf_counter,
                          sync: Optional[Callable[[], None]] = None,
                          progress: bool = False,
                          settings: Optional[dict] = None) -> BenchmarkResult:
    """Time callables in alternation and compare their throughputs.

    After ``warmup`` untimed calls each, every round times a block of
    ``iters_per_round`` calls per callable, in the order of ``fns``;
    throughput ``= iters_per_round * items_per_call / seconds``.

    Args:
        fns (dict[str, Callable[[], Any]]): Name -> callable without
            arguments (e.g. one batch of a model).
        rounds (int): Number of rounds. Defaults to 10.
        iters_per_round (int): Calls per callable and round. Defaults to 5.
        warmup (int): Untimed calls per callable. Defaults to 2.
        items_per_call (int): Items (images, clips) per call: the batch.
        baseline (str, optional): Name the ratios are relative to (first).
        clock (Callable[[], float]): Time source in seconds (fake in tests).
        sync (Callable[[], None], optional): Called after each block, e.g.
            ``torch.cuda.synchronize``.
        progress (bool): Show a tqdm bar over rounds. Defaults to False.
        settings (dict, optional): Extra entries for ``result.settings``.

    Returns:
        BenchmarkResult: Per-round throughputs, medians and speed-ups.
    """
    if not fns:
        raise ValueError('interleaved_benchmark() needs at least one callable')
    if rounds < 1 or iters_per_round < 1:
        raise ValueError('rounds and iters_per_round must be >= 1')
    names = list(fns)
    baseline = names[0] if baseline is None else baseline
    if baseline not in fns:
        raise KeyError(f'baseline {baseline!r} is not one of {names}')

    for _ in range(warmup):
        for name in names:
            fns[name]()
    if sync is not None:
        sync()

    throughput: Dict[str, List[float]] = {name: [] for name in names}
    order: List[str] = []
    round_iter = range(rounds)
    if progress:
        from tqdm import tqdm
        round_iter = tqdm(round_iter, desc='benchmark', unit='round')
    for _ in round_iter:
        for name in names:
            fn = fns[name]
            start = clock()
            for _ in range(iters_per_round):
                fn()
            if sync is not None:
                sync()
            elapsed = clock() - start
            order.append(name)
            elapsed = max(elapsed, 1e-12)
            throughput[name].append(iters_per_round * items_per_call / elapsed)

    median = {n: statistics.median(v) for n, v in throughput.items()}
    ratios = {
        n: [a / b for a, b in zip(throughput[n], throughput[baseline])]
        for n in names if n != baseline
    }
    speedup = {n: RatioStats.of(r) for n, r in ratios.items()}
    all_settings = dict(rounds=rounds,
                        iters_per_round=iters_per_round,
                        warmup=warmup,
                        items_per_call=items_per_call)
    all_settings.update(settings or {})
    return BenchmarkResult(names, baseline, throughput, median, ratios,
                           speedup, order, all_settings)
