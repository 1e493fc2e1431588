# Copyright (c) mmvitaccel contributors. All rights reserved.
"""Interleaved speed benchmark.

Timing two models one after the other lets machine noise (other processes,
thermal or frequency changes) hit one more than the other. Here the callables
run round by round in alternation, ``A, B, A, B, ...``, every round times
``iters_per_round`` calls of each, and the speed-up is taken from the
per-round ratios of throughputs, so that a slow phase of the machine slows
both sides of a ratio.

:func:`interleaved_benchmark` only needs callables; the helpers below it
build the inputs of OpenMMLab models from their configs for the CLI tools
``tools/analysis/benchmark.py`` and ``tools/analysis/get_flops.py``.
"""
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

__all__ = [
    'RatioStats', 'BenchmarkResult', 'interleaved_benchmark',
    'default_num_threads', 'TOOLBOXES', 'DEFAULT_SHAPES', 'build_model',
    'load_config', 'toolbox_of', 'backbone_input', 'dummy_data_batch',
    'real_data_batches', 'tensor_mode_kwargs', 'parse_shape'
]

# --------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------


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
        names (list[str]): Names of the benchmarked callables, in run order.
        baseline (str): Name that the ratios are relative to.
        throughput (dict[str, list[float]]): Items (images) per second of
            each name in each round.
        median (dict[str, float]): Median of ``throughput`` per name.
        ratios (dict[str, list[float]]): Per-round ``throughput[name] /
            throughput[baseline]`` for every name but the baseline.
        speedup (dict[str, RatioStats]): Summary of ``ratios`` per name.
        order (list[str]): The names in the order in which the timed
            (non warm-up) calls ran, one entry per timed block.
        settings (dict): Rounds, iterations, warm-up, items per call and
            anything the caller adds (threads, shapes, configs).
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

    Every callable is first called ``warmup`` times (also alternating). Then
    each of ``rounds`` rounds runs, for each callable in the order of
    ``fns``, a block of ``iters_per_round`` calls timed as a whole; a
    block's throughput is ``iters_per_round * items_per_call / seconds``.
    With two callables A, B the timed blocks run A, B, A, B, ...

    Args:
        fns (dict[str, Callable[[], Any]]): Name -> callable without
            arguments (e.g. a closure running one batch of a model).
        rounds (int): Number of rounds. Defaults to 10.
        iters_per_round (int): Calls per callable and round. Defaults to 5.
        warmup (int): Untimed calls per callable before the rounds.
            Defaults to 2.
        items_per_call (int): Items (images, clips) processed per call, i.e.
            the batch size. Defaults to 1.
        baseline (str, optional): Name that ratios are relative to.
            Defaults to the first name of ``fns``.
        clock (Callable[[], float]): Time source in seconds. Defaults to
            :func:`time.perf_counter`; inject a fake one in tests.
        sync (Callable[[], None], optional): Called after each block before
            reading the clock, e.g. ``torch.cuda.synchronize``.
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


# --------------------------------------------------------------------------
# OpenMMLab models from configs (shared by tools/analysis/*.py)
# --------------------------------------------------------------------------

#: Toolboxes the tools know, by the top-level package of the model class.
TOOLBOXES = ('mmpretrain', 'mmdet', 'mmseg', 'mmaction')

#: Default input shape per toolbox: ``(H, W)`` for images, ``(T, H, W)`` for
#: video (the backbone then gets ``(N, C, T, H, W)``).
DEFAULT_SHAPES = {
    'mmpretrain': (224, 224),
    'mmdet': (800, 1333),
    'mmseg': (512, 512),
    'mmaction': (32, 224, 224),
}


def load_config(config: str,
                cfg_options: Optional[dict] = None,
                tiny: bool = False):
    """Load a config file (``mmpretrain::...`` package paths allowed).

    Args:
        config (str): Path of the config, or ``toolbox::relative/path.py``.
        cfg_options (dict, optional): Overrides merged into the config.
        tiny (bool): Apply the tiny overlay
            (:func:`mmvitaccel.utils.tiny.tinyfy_config`) after the
            overrides. Defaults to False.

    Returns:
        mmengine.Config: The config.
    """
    from .launch import load_config_file
    cfg = load_config_file(config, cfg_options)
    if tiny:
        from .tiny import tinyfy_config
        cfg = tinyfy_config(cfg)
    return cfg


def build_model(cfg,
                checkpoint: Optional[str] = None,
                device: str = 'cpu') -> nn.Module:
    """Build ``cfg.model`` in the config's default scope, in eval mode,
    completed by a top-level ``cfg.data_preprocessor`` as the Runner does.

    SyncBN layers are reverted to BN (they need a process group) and no
    ``init_weights`` is called, so nothing is downloaded; weights are random
    unless ``checkpoint`` is given.

    Args:
        cfg (mmengine.Config): The config.
        checkpoint (str, optional): A checkpoint to load. Defaults to None.
        device (str): Device to put the model on. Defaults to ``'cpu'``.

    Returns:
        nn.Module: The model, in eval mode.
    """
    import mmvitaccel  # noqa: F401  (stack fixes, registers components)
    from mmengine.model import revert_sync_batchnorm
    from mmengine.registry import MODELS, DefaultScope, init_default_scope
    scope = cfg.get('default_scope')
    if scope is not None:
        init_default_scope(scope)
    model_cfg = cfg.model.copy()
    # as mmengine's Runner does: a top-level data_preprocessor (e.g.
    # mmpretrain's, with num_classes) completes the model's
    if cfg.get('data_preprocessor') is not None:
        model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor)
    with DefaultScope.overwrite_default_scope(scope):
        model = MODELS.build(model_cfg)
    model = revert_sync_batchnorm(model)
    if checkpoint is not None:
        from mmengine.runner import load_checkpoint
        load_checkpoint(model, checkpoint, map_location='cpu')
    return model.to(device).eval()


def toolbox_of(model: nn.Module, cfg=None) -> str:
    """The OpenMMLab toolbox a model belongs to (one of :data:`TOOLBOXES`),
    from the packages of its class and base classes, else from the config's
    ``default_scope``.

    Args:
        model (nn.Module): The model.
        cfg (mmengine.Config, optional): Its config.

    Returns:
        str: The toolbox name.
    """
    for klass in type(model).__mro__:
        root = klass.__module__.split('.')[0]
        if root in TOOLBOXES:
            return root
    scope = cfg.get('default_scope') if cfg is not None else None
    if scope in TOOLBOXES:
        return scope
    raise ValueError(f'cannot tell the toolbox of {type(model).__name__}; '
                     f'expected a model of one of {TOOLBOXES}')


def backbone_input(toolbox: str,
                   shape: Sequence[int],
                   batch_size: int = 1) -> torch.Tensor:
    """A random backbone input: ``(B, 3, H, W)``, or ``(B, 3, T, H, W)``
    for video.

    Args:
        toolbox (str): One of :data:`TOOLBOXES`.
        shape (Sequence[int]): ``(H, W)`` or, for video, ``(T, H, W)``.
        batch_size (int): ``B``. Defaults to 1.

    Returns:
        Tensor: The input.
    """
    return torch.randn(batch_size, 3, *shape)


def dummy_data_batch(toolbox: str,
                     shape: Sequence[int],
                     batch_size: int = 1) -> dict:
    """A raw data batch as a test dataloader yields it (before the data
    preprocessor), with random pixels and the meta information that the
    toolbox's ``predict``/``tensor`` modes read.

    Args:
        toolbox (str): One of :data:`TOOLBOXES`.
        shape (Sequence[int]): ``(H, W)``; for mmaction ``(T, H, W)``, one
            view per sample (inputs ``(1, 3, T, H, W)`` each).
        batch_size (int): Number of samples. Defaults to 1.

    Returns:
        dict: ``{'inputs': list[Tensor], 'data_samples': list}``.
    """
    if toolbox == 'mmaction':
        from mmaction.structures import ActionDataSample
        inputs = [
            torch.randint(0, 256, (1, 3, *shape), dtype=torch.uint8)
            for _ in range(batch_size)
        ]
        samples = [ActionDataSample() for _ in range(batch_size)]
        return dict(inputs=inputs, data_samples=samples)
    h, w = shape
    inputs = [
        torch.randint(0, 256, (3, h, w), dtype=torch.uint8)
        for _ in range(batch_size)
    ]
    if toolbox == 'mmpretrain':
        from mmpretrain.structures import DataSample
        samples = [DataSample() for _ in range(batch_size)]
    elif toolbox == 'mmdet':
        from mmdet.structures import DetDataSample
        samples = [
            DetDataSample(metainfo=dict(img_id=i,
                                        img_shape=(h, w),
                                        ori_shape=(h, w),
                                        scale_factor=(1.0, 1.0)))
            for i in range(batch_size)
        ]
    elif toolbox == 'mmseg':
        from mmseg.structures import SegDataSample
        samples = [
            SegDataSample(metainfo=dict(img_shape=(h, w), ori_shape=(h, w)))
            for _ in range(batch_size)
        ]
    else:
        raise ValueError(f'unknown toolbox {toolbox!r}')
    return dict(inputs=inputs, data_samples=samples)


def real_data_batches(cfg,
                      num_images: int,
                      batch_size: int = 1,
                      progress: bool = False) -> List[dict]:
    """The first ``num_images`` samples of the config's test dataloader,
    as raw batches of ``batch_size`` (the last one may be smaller).

    Args:
        cfg (mmengine.Config): The config (its ``test_dataloader`` is used,
            with ``batch_size`` overridden and no workers).
        num_images (int): Number of samples to take.
        batch_size (int): Samples per batch. Defaults to 1.
        progress (bool): Show a tqdm bar. Defaults to False.

    Returns:
        list[dict]: Raw data batches ``{'inputs': [...], 'data_samples':
        [...]}``.
    """
    import copy

    from mmengine.registry import DefaultScope
    from mmengine.runner import Runner
    loader_cfg = copy.deepcopy(cfg.test_dataloader)
    loader_cfg['batch_size'] = batch_size
    loader_cfg['num_workers'] = 0
    loader_cfg['persistent_workers'] = False
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope')):
        loader = Runner.build_dataloader(loader_cfg)
    batches, seen = [], 0
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=num_images, desc='loading images', unit='img')
    for batch in loader:
        n = min(len(batch['inputs']), num_images - seen)
        batch = {k: v[:n] for k, v in batch.items()}
        batches.append(batch)
        seen += n
        if bar is not None:
            bar.update(n)
        if seen >= num_images:
            break
    if bar is not None:
        bar.close()
    if seen < num_images:
        raise ValueError(f'the test dataloader has only {seen} samples, '
                         f'{num_images} were asked for')
    return batches


def tensor_mode_kwargs(toolbox: str) -> dict:
    """Keyword arguments of ``model.forward`` that run the whole network
    without post-processing: ``mode='tensor'``, plus ``stage='head'`` for
    mmaction recognizers (whose tensor mode stops after the backbone by
    default).

    Args:
        toolbox (str): One of :data:`TOOLBOXES`.

    Returns:
        dict: The keyword arguments.
    """
    kwargs = dict(mode='tensor')
    if toolbox == 'mmaction':
        kwargs['stage'] = 'head'
    return kwargs


def parse_shape(shape: Optional[Sequence[int]],
                toolbox: str) -> Tuple[int, ...]:
    """The input shape from ``--shape`` values or the toolbox default.

    Args:
        shape (Sequence[int], optional): ``S`` (square image), ``H W``, or
            ``T H W`` for video; None for :data:`DEFAULT_SHAPES`.
        toolbox (str): One of :data:`TOOLBOXES`.

    Returns:
        tuple[int, ...]: ``(H, W)`` or ``(T, H, W)``.
    """
    if not shape:
        return tuple(DEFAULT_SHAPES[toolbox])
    shape = tuple(int(s) for s in shape)
    if toolbox == 'mmaction':
        if len(shape) == 1:
            shape = (DEFAULT_SHAPES['mmaction'][0], ) + shape * 2
        elif len(shape) == 2:
            shape = (DEFAULT_SHAPES['mmaction'][0], ) + shape
        if len(shape) != 3:
            raise ValueError(f'--shape for video is T H W, got {shape}')
        return shape
    if len(shape) == 1:
        shape = shape * 2
    if len(shape) != 2:
        raise ValueError(f'--shape for images is H W, got {shape}')
    return shape
