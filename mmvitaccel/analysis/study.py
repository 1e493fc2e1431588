"""The small-scale accuracy study (``docs/study.md``): a host trained on
real digits, training-free pruning references on it and the trained
methods (the entries of ``configs/study/methods.py``); accuracy,
parameters, FLOPs and measured speed of each, as CSV rows and plots.

``tools/analysis/tradeoff_study.py`` is the command; the logic is here:

* :func:`host_checkpoint` trains the host with mmengine's runner, or reuses
  the checkpoint cached under ``cache_dir`` by the config's text and seed;
* :func:`pruned_host` is the trained host with token pruning before a layer
  (:class:`~mmvitaccel.models.TokenPrunedVisionTransformer` on the host's
  weights, the value selector at density ``rho``, tokens dropped):
  ``scorer='tis'`` (SaiT's TIS), ``'cls'`` (EViT's class attention),
  ``'random'`` (the floor);
* :func:`top1` evaluates a model on preprocessed test batches;
* :func:`reference_rows` sweeps scorers, densities and seeds;
* :func:`measure` adds parameters, FLOPs (the one counter,
  :func:`~mmvitaccel.analysis.flops.count_flops`) and the speed ratio to
  the host, timed interleaved
  (:func:`~mmvitaccel.analysis.timing.interleaved_benchmark`);
* :func:`write_csv` and :func:`plot_tradeoff` write the results.

A trained method is an entry of :data:`METHODS_FILE`, read by
:func:`load_methods` into a :class:`StudyMethod`: a config, its
cfg-options, how it starts from the host, the test-time settings to
evaluate and an optional fold; :func:`method_checkpoint` trains (or reuses)
it per seed, running ``tools/dgssa_init.py`` and the fold tool where the
entry asks (:func:`run_tool`), and :func:`trained_rows` evaluates it.
"""
import copy
import csv
import hashlib
import os
import os.path as osp
import statistics
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import torch

__all__ = [
    'FIELDS', 'HOST_CONFIG', 'INITS', 'METHODS_FILE', 'REFERENCE_SCORERS',
    'StudyMethod', 'config_key', 'host_checkpoint', 'load_methods',
    'method_checkpoint', 'read_search', 'run_tool', 'setting_label',
    'trained_rows',
    'markdown_table', 'measure', 'plot_tradeoff', 'pruned_host',
    'read_csv', 'reference_rows', 'summarise', 'test_inputs', 'top1',
    'write_csv'
]

#: The host recipe, relative to the repository root.
HOST_CONFIG = 'configs/study/digits_deit_host.py'
#: Training-free scorers: SaiT's TIS, EViT's class attention, random.
REFERENCE_SCORERS = ('tis', 'cls', 'random')
#: How a trained method starts: the host's weights (``load_from``), a
#: DGSSA checkpoint made by ``tools/dgssa_init.py`` from the host, or
#: random initialisation.
INITS = ('host', 'dgssa_init', 'scratch')
#: The CSV's columns.
FIELDS = ('method', 'setting', 'params', 'mflops', 'flops_ratio',
          'top1_mean', 'top1_std', 'num_seeds', 'speed_ratio',
          'speed_ratio_q1', 'speed_ratio_q3')


@dataclass
class StudyMethod:
    """A trained method of the study: an entry of
    ``configs/study/methods.py`` (:data:`METHODS_FILE`), which documents
    the fields.

    Attributes:
        name (str): the CSV's method column.
        setting (str): the trained model's setting (the CSV's setting
            column when ``settings`` is empty).
        config (str): its config, relative to the repository root.
        cfg_options (dict): fixed overrides, for training and testing.
        init (str): one of :data:`INITS`.
        host_options (tuple[str]): cfg keys that receive the host
            checkpoint's path.
        dgssa_options (tuple[str]): cfg keys that receive
            ``tools/dgssa_init.py``'s output (``init='dgssa_init'``).
        dgssa_init_args (tuple[str]): more arguments of that tool.
        settings (dict): test-time label -> ``cfg_options`` of the same
            weights (empty: one setting, the config's own).
        fold (dict, optional): ``tool``, ``args`` and ``test_options``: the
            trained weights are folded by ``python TOOL CONFIG CKPT OUT
            *args`` before testing, and tested with ``test_options``.
        search (dict, optional): ``tool`` and ``args``: before anything
            else, ``python TOOL CONFIG --checkpoint HOST --out OUT *args``
            chooses part of the architecture on the host and writes it as
            JSON (``cfg_options``, as ``tools/glad_search.py --out``); those
            options are merged into the method's. Setting labels may name
            them as ``{key}`` (the last part of the option's name).
    """
    config: str
    name: str = ''
    setting: str = ''
    cfg_options: dict = field(default_factory=dict)
    init: str = 'host'
    host_options: tuple = ('load_from', )
    dgssa_options: tuple = ()
    dgssa_init_args: tuple = ()
    settings: dict = field(default_factory=dict)
    fold: Optional[dict] = None
    search: Optional[dict] = None

    def __post_init__(self):
        if self.init not in INITS:
            raise ValueError(f'init must be one of {INITS}, got '
                             f'{self.init!r}')
        if self.init == 'dgssa_init' and not self.dgssa_options:
            raise ValueError('init=\'dgssa_init\' needs dgssa_options (the '
                             'cfg keys that receive the DGSSA checkpoint)')
        if self.fold is not None and not {'tool', 'args', 'test_options'
                                          } <= set(self.fold):
            raise ValueError('fold must give tool, args and test_options, '
                             f'got {sorted(self.fold)}')
        if self.search is not None and set(self.search) != {'tool', 'args'}:
            raise ValueError('search must give tool and args, got '
                             f'{sorted(self.search)}')
        if self.search is not None and self.init == 'scratch':
            raise ValueError('search runs on the host: init=\'scratch\' '
                             'has none')


#: The trained methods' table, relative to the repository root.
METHODS_FILE = 'configs/study/methods.py'


def load_methods(path):
    """The ``METHODS`` entries of a methods file, by name.

    Args:
        path (str): e.g. ``<repo>/`` :data:`METHODS_FILE`.

    Returns:
        dict[str, StudyMethod]: in the file's order.
    """
    import runpy
    entries = runpy.run_path(path)['METHODS']
    methods = {}
    for entry in entries:
        method = StudyMethod(**entry)
        if method.name in methods:
            raise ValueError(f'{path}: method {method.name!r} twice')
        methods[method.name] = method
    return methods


def config_key(cfg, seed):
    """A short hash of a config's text and a seed (the cache key)."""
    text = cfg.pretty_text + f'\nseed={seed}'
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _train(cfg, work_dir, seed):
    """Train ``cfg`` with mmengine's runner into ``work_dir``; return the
    path of the final weights (written atomically, so that an interrupted
    run leaves no checkpoint that looks complete)."""
    from mmengine.runner import Runner
    final = osp.join(work_dir, 'final.pth')
    cfg = copy.deepcopy(cfg)
    cfg.work_dir = work_dir
    cfg.randomness = dict(seed=seed, deterministic=False)
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', interval=-1,
                                        save_last=False)
    runner = Runner.from_cfg(cfg)
    runner.train()
    tmp = final + '.tmp'
    torch.save(dict(state_dict=runner.model.state_dict(),
                    meta=dict(seed=seed, epoch=runner.epoch)), tmp)
    os.replace(tmp, final)
    return final


def host_checkpoint(cfg, seed, cache_dir, train=True):
    """The trained host's weights for ``(cfg, seed)``: cached, or trained
    now.

    Args:
        cfg (mmengine.Config): the host config (with any overrides).
        seed (int): the training seed.
        cache_dir (str): where checkpoints are kept, one folder per
            :func:`config_key`.
        train (bool): train when nothing is cached (else raise).

    Returns:
        str: the checkpoint path.
    """
    work_dir = osp.join(cache_dir, f'host_seed{seed}_{config_key(cfg, seed)}')
    final = osp.join(work_dir, 'final.pth')
    if osp.isfile(final):
        return final
    if not train:
        raise FileNotFoundError(f'no cached host in {work_dir}; run without '
                                '--no-train to train it')
    return _train(cfg, work_dir, seed)


def _slug(name):
    return ''.join(c if c.isalnum() else '_' for c in name).strip('_')


def _dump(cfg, path):
    """Write a resolved config for a tool to read."""
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    cfg.dump(path)


def run_tool(repo, tool, args, log):
    """Run ``python REPO/TOOL *args`` in the repository, its output going
    to ``log``; raise with the log's tail if it fails."""
    import subprocess
    import sys
    cmd = [sys.executable, osp.join(repo, tool)] + [str(a) for a in args]
    os.makedirs(osp.dirname(osp.abspath(log)), exist_ok=True)
    with open(log, 'w') as f:
        done = subprocess.run(cmd, cwd=repo, stdout=f,
                              stderr=subprocess.STDOUT)
    if done.returncode:
        with open(log) as f:
            tail = f.read()[-2000:]
        raise RuntimeError(f'{" ".join(cmd)} failed ({done.returncode}); '
                           f'the end of {log}:\n{tail}')


def _run_tool_atomic(repo, tool, args, out):
    """Run a tool that writes ``out`` (the placeholder ``'{out}'`` in
    ``args``) through a temporary file, so that an interrupted run leaves
    no file that looks complete; its log is ``out``'s name with ``.log``."""
    tmp = out + '.tmp'
    run_tool(repo, tool, [tmp if a == '{out}' else a for a in args],
             osp.splitext(out)[0] + '.log')
    os.replace(tmp, out)


def method_checkpoint(method, host_ckpt, seed, cache_dir, repo):
    """A trained method's weights for a seed, cached or trained now from
    the host (:attr:`StudyMethod.init`), folded if the method folds.

    For ``init='dgssa_init'``, ``tools/dgssa_init.py`` first runs on the
    host (once per host and method); for ``fold``, the fold tool runs on
    the trained weights.

    Args:
        method (StudyMethod): the entry.
        host_ckpt (str): the trained host.
        seed (int): the training seed.
        cache_dir (str): the cache folder.
        repo (str): the repository root (configs and tools).

    Returns:
        tuple[str, dict]: the checkpoint to test and the ``cfg_options``
        to test it with (the fold's ``test_options`` and the searched
        options, or none).
    """
    from ..apis.harness import load_config
    config = osp.join(repo, method.config)
    options = dict(method.cfg_options)
    if method.init != 'scratch':  # 'scratch' starts from no weights
        options.update({k: host_ckpt for k in method.host_options})
    slug = _slug(method.name or osp.basename(config))
    searched = {}
    if method.search is not None:
        host_cfg = load_config(config, copy.deepcopy(options))
        layout = osp.join(cache_dir,
                          f'{slug}_search_{config_key(host_cfg, 0)}.json')
        if not osp.isfile(layout):
            resolved = osp.splitext(layout)[0] + '_config.py'
            _dump(host_cfg, resolved)
            _run_tool_atomic(repo, method.search['tool'],
                             [resolved, '--checkpoint', host_ckpt, '--out',
                              '{out}', *method.search['args']], layout)
        searched = read_search(layout)
        options.update(searched)
    # the training cache key (per seed) and the host's (shared by the
    # seeds); the DGSSA checkpoint's path below is a function of the same
    # options
    base_cfg = load_config(config, copy.deepcopy(options))
    key = config_key(base_cfg, seed)
    if method.init == 'dgssa_init':
        dgssa = osp.join(cache_dir,
                         f'{slug}_dgssa_{config_key(base_cfg, 0)}.pth')
        if not osp.isfile(dgssa):
            # the tools read the resolved config from a file: options hold
            # values (dicts, tuples) that --cfg-options cannot carry
            resolved = osp.splitext(dgssa)[0] + '_config.py'
            _dump(base_cfg, resolved)
            _run_tool_atomic(
                repo, 'tools/dgssa_init.py',
                [resolved, '--checkpoint', host_ckpt, '--out', '{out}',
                 '--plot', osp.splitext(dgssa)[0] + '.png',
                 *method.dgssa_init_args], dgssa)
        options.update({k: dgssa for k in method.dgssa_options})
    cfg = load_config(config, copy.deepcopy(options))
    work_dir = osp.join(cache_dir, f'{slug}_seed{seed}_{key}')
    final = osp.join(work_dir, 'final.pth')
    if not osp.isfile(final):
        _train(cfg, work_dir, seed)
    if method.fold is None:
        return final, searched
    folded = osp.join(work_dir, 'folded.pth')
    if not osp.isfile(folded):
        resolved = osp.join(work_dir, 'trained_config.py')
        _dump(cfg, resolved)
        _run_tool_atomic(repo, method.fold['tool'],
                         [resolved, final, '{out}', *method.fold['args']],
                         folded)
    return folded, {**searched, **method.fold['test_options']}


def read_search(path):
    """The ``cfg_options`` of a search tool's JSON output (tuples for
    lists, as configs write them)."""
    import json
    with open(path) as f:
        layout = json.load(f)
    if not isinstance(layout, dict) or not isinstance(
            layout.get('cfg_options'), dict):
        raise ValueError(f'{path}: a search output needs a dict '
                         '"cfg_options"')
    return {k: tuple(v) if isinstance(v, list) else v
            for k, v in layout['cfg_options'].items()}


def setting_label(label, options):
    """``label`` with ``{key}`` filled from ``options`` (by the last
    part of each option's name; sequences joined by '/')."""
    names = {k.split('.')[-1]: '/'.join(map(str, v)) if isinstance(
        v, (list, tuple)) else v for k, v in options.items()}
    return label.format(**names) if names else label


def build_study_model(cfg, checkpoint, cfg_options=None):
    """A model of a config with its weights, in eval mode."""
    from ..apis.harness import build_model
    cfg = copy.deepcopy(cfg)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    return build_model(cfg, checkpoint)


def pruned_host(cfg, checkpoint, scorer, density, prune_before=(3, )):
    """The trained host with training-free token pruning.

    Before layer ``l`` (0-based, ``prune_before``) the patch tokens are
    scored from layer ``l - 1``'s attention and the ``round(rho (N + 1))
    - 1`` best are kept (SaiT's value selector); the others are dropped.
    ``density=1`` is the host exactly.

    Args:
        cfg (mmengine.Config): the host config (an mmpretrain
            ``VisionTransformer`` backbone).
        checkpoint (str): the host's weights.
        scorer (str): ``'tis'``, ``'cls'``, ``'random'`` (or ``'asvit'``).
        density (float): ``rho`` in ``(0, 1]``.
        prune_before (Sequence[int]): the pruning layers.

    Returns:
        nn.Module: the classifier, in eval mode.
    """
    cfg = copy.deepcopy(cfg)
    backbone = cfg.model.backbone
    if backbone.type.split('.')[-1] != 'VisionTransformer':
        raise ValueError('pruned_host needs a VisionTransformer host, got '
                         f'{backbone.type}')
    backbone.update(type='mmvitaccel.TokenPrunedVisionTransformer',
                    prune_before=tuple(prune_before), scorer=scorer,
                    selector='value', density=density,
                    test_execution='drop')
    return build_study_model(cfg, checkpoint)


def test_inputs(cfg, num_images=None, batch_size=128):
    """The test split, preprocessed: ``(inputs, labels)`` batches.

    Args:
        cfg (mmengine.Config): a study config.
        num_images (int, optional): the first images only (default: all).
        batch_size (int): images per batch.

    Returns:
        list[tuple[Tensor, Tensor]]: ``(B, 3, H, W)`` and ``(B, )``.
    """
    from mmengine.registry import MODELS, DefaultScope

    from ..apis.harness import real_data_batches
    if num_images is None:
        from mmengine.registry import DATASETS
        with DefaultScope.overwrite_default_scope(cfg.get('default_scope')):
            num_images = len(DATASETS.build(cfg.test_dataloader.dataset))
    batches = real_data_batches(cfg, num_images, batch_size)
    pre_cfg = dict(type='ClsDataPreprocessor', **cfg.data_preprocessor)
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope')):
        pre = MODELS.build(pre_cfg)
    out = []
    for batch in batches:
        data = pre(batch, False)
        labels = torch.cat([s.gt_label for s in data['data_samples']])
        out.append((data['inputs'], labels))
    return out


def top1(model, inputs, seed=0):
    """Top-1 accuracy of a classifier on preprocessed batches, with torch's
    generator seeded first (the random scorer draws from it).

    Args:
        model (nn.Module): an mmpretrain classifier (``mode='tensor'``
            returns the logits).
        inputs (list[tuple[Tensor, Tensor]]): from :func:`test_inputs`.
        seed (int): the evaluation seed.

    Returns:
        float: the share of correct predictions.
    """
    torch.manual_seed(seed)
    correct = total = 0
    with torch.no_grad():
        for images, labels in inputs:
            logits = model(images, mode='tensor')
            correct += int((logits.argmax(dim=-1) == labels).sum())
            total += len(labels)
    return correct / total


def summarise(values):
    """``(mean, std)`` of per-seed accuracies (std 0 for one seed)."""
    values = list(values)
    std = statistics.stdev(values) if len(values) > 1 else 0.
    return statistics.fmean(values), std


def reference_rows(cfg, checkpoint, inputs, densities, seeds,
                   scorers=REFERENCE_SCORERS, prune_before=(3, ),
                   progress=None):
    """Training-free pruning of the trained host, per scorer and density.

    Args:
        cfg (mmengine.Config): the host config.
        checkpoint (str): the host's weights.
        inputs (list): test batches (:func:`test_inputs`).
        densities (Sequence[float]): the ``rho`` values.
        seeds (Sequence[int]): evaluation seeds of the ``'random'``
            scorer; the host and the deterministic scorers are evaluated
            once (``num_seeds`` 1, std 0).
        scorers (Sequence[str]): scorers to evaluate.
        prune_before (Sequence[int]): the pruning layers.
        progress (Callable[[str], None], optional): called after each
            model is evaluated.

    Returns:
        list[dict]: ``method, setting, top1_mean, top1_std, num_seeds,
        per_seed`` and the model factory ``build`` (for :func:`measure`);
        the first row is the host.
    """
    host = build_study_model(cfg, checkpoint)
    accs = [top1(host, inputs, seeds[0])]  # deterministic: once
    rows = [dict(method='host', setting='dense',
                 build=lambda: build_study_model(cfg, checkpoint),
                 per_seed=accs)]
    if progress:
        progress('host')
    for scorer in scorers:
        for rho in densities:
            model = pruned_host(cfg, checkpoint, scorer, rho, prune_before)
            # only the random scorer depends on the seed
            runs = seeds if scorer == 'random' else seeds[:1]
            accs = [top1(model, inputs, s) for s in runs]
            rows.append(dict(
                method=f'{scorer} pruning', setting=f'rho={rho:g}',
                build=(lambda sc=scorer, r=rho: pruned_host(
                    cfg, checkpoint, sc, r, prune_before)),
                per_seed=accs))
            if progress:
                progress(f'{scorer} rho={rho:g}')
    for row in rows:
        row['top1_mean'], row['top1_std'] = summarise(row['per_seed'])
        row['num_seeds'] = len(row['per_seed'])
    return rows


def measure(rows, inputs, rounds=5, batch_size=32, progress=False):
    """Add ``params``, ``mflops`` (per image), ``flops_ratio`` and the
    speed ratio to the host (median and quartiles over interleaved rounds
    on one batch) to each row; the first row is the baseline.

    Args:
        rows (list[dict]): rows with a ``build`` factory.
        inputs (list): test batches; the first ``batch_size`` images are
            timed.
        rounds (int): interleaved timing rounds.
        batch_size (int): images per timed call.
        progress (bool): a tqdm bar over the rounds.

    Returns:
        list[dict]: the rows, completed.
    """
    from .flops import count_flops, count_params
    from .timing import interleaved_benchmark
    images = torch.cat([x for x, _ in inputs])[:batch_size]
    models = {}
    for i, row in enumerate(rows):
        model = row['build']()
        row['params'] = count_params(model)
        row['mflops'] = count_flops(model, images[:1],
                                    dict(mode='tensor')).total / 1e6
        models[i] = model

    def call(model):
        def run():
            with torch.no_grad():
                model(images, mode='tensor')
        return run

    names = {i: f'{r["method"]} {r["setting"]}' for i, r in enumerate(rows)}
    result = interleaved_benchmark(
        {names[i]: call(m) for i, m in models.items()}, rounds=rounds,
        iters_per_round=1, warmup=1, items_per_call=len(images),
        baseline=names[0], progress=progress)
    for i, row in enumerate(rows):
        row['flops_ratio'] = row['mflops'] / rows[0]['mflops']
        if i == 0:
            row['speed_ratio'] = row['speed_ratio_q1'] = \
                row['speed_ratio_q3'] = 1.
        else:
            stats = result.speedup[names[i]]
            row['speed_ratio'], row['speed_ratio_q1'], \
                row['speed_ratio_q3'] = stats.median, stats.q1, stats.q3
    return rows


def write_csv(rows, path):
    """The rows' :data:`FIELDS` as CSV."""
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    with open(path, 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, extrasaction='ignore')
        writer.writeheader()
        for row in rows:
            writer.writerow({
                k: f'{row[k]:.6g}' if isinstance(row[k], float) else row[k]
                for k in FIELDS
            })


def read_csv(path):
    """The rows of a :func:`write_csv` file, numbers as numbers."""
    rows = []
    with open(path, newline='') as f:
        for row in csv.DictReader(f):
            for k in FIELDS[2:]:
                row[k] = int(row[k]) if k in ('params', 'num_seeds') \
                    else float(row[k])
            rows.append(row)
    return rows


def markdown_table(rows, references=True):
    """The rows as a Markdown table (top-1 in %, mean ± std over seeds).

    Args:
        rows (list[dict]): :func:`read_csv` rows (or the command's).
        references (bool): include the training-free references (methods
            named ``'<scorer> pruning'``); the host is always included.

    Returns:
        str: the table, one line per row, ending with a newline.
    """
    lines = ['| method | setting | MFLOPs (ratio) | speed ratio, batch 32 '
             '(q1–q3) | top-1 % | seeds |',
             '| --- | --- | --- | --- | --- | --- |']
    for r in rows:
        if not references and r['method'].endswith(' pruning'):
            continue
        top1 = f'{100 * r["top1_mean"]:.1f}'
        if r['num_seeds'] > 1:
            top1 += f' ± {100 * r["top1_std"]:.1f}'
        lines.append(
            f'| {r["method"]} | {r["setting"]} | {r["mflops"]:.2f} '
            f'({r["flops_ratio"]:.2f}) | {r["speed_ratio"]:.2f} '
            f'({r["speed_ratio_q1"]:.2f}–{r["speed_ratio_q3"]:.2f}) | '
            f'{top1} | {r["num_seeds"]} |')
    return '\n'.join(lines) + '\n'


def plot_tradeoff(rows, path, x='mflops',
                  xlabel='MFLOPs per image'):
    """Top-1 (mean, with the seed std as error bars) against ``x``, one
    line per method, the host as a black square."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4.5))
    methods = [m for m in dict.fromkeys(r['method'] for r in rows)
               if m != 'host']
    for method in methods:
        pts = sorted((r for r in rows if r['method'] == method),
                     key=lambda r: r[x])
        ax.errorbar([r[x] for r in pts], [r['top1_mean'] for r in pts],
                    yerr=[r['top1_std'] for r in pts], marker='o',
                    capsize=2, label=method)
    for r in rows:
        if r['method'] == 'host':
            ax.plot(r[x], r['top1_mean'], 's', color='k', label='host')
    ax.set_xlabel(xlabel)
    ax.set_ylabel('top-1 (test split)')
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def trained_rows(methods: Dict[str, StudyMethod], host_ckpt, inputs,
                 seeds: Sequence[int], cache_dir: str, repo: str,
                 progress: Optional[Callable[[str], None]] = None
                 ) -> List[dict]:
    """Rows of trained methods: each trained per seed from the host (or
    taken from the cache), evaluated at each of its settings.

    Returns:
        list[dict]: as :func:`reference_rows`'s.
    """
    from ..apis.harness import load_config
    rows = []
    for name, method in methods.items():
        runs = {s: method_checkpoint(method, host_ckpt, s, cache_dir, repo)
                for s in seeds}
        cfg = load_config(osp.join(repo, method.config),
                          copy.deepcopy(method.cfg_options))

        def build(seed, options, cfg=cfg, runs=runs):
            ckpt, test_options = runs[seed]
            return build_study_model(cfg, ckpt, {**test_options, **options})

        searched = next(iter(runs.values()))[1] if method.search else {}
        searched = {k: v for k, v in searched.items()
                    if k not in (method.fold or {}).get('test_options', {})}
        settings = method.settings or {method.setting or 'default': {}}
        for label, options in settings.items():
            label = setting_label(label, searched)
            accs = [top1(build(s, options), inputs, s) for s in seeds]
            mean, std = summarise(accs)
            rows.append(dict(
                method=name, setting=label, per_seed=accs,
                top1_mean=mean, top1_std=std, num_seeds=len(seeds),
                build=(lambda o=options, b=build: b(seeds[0], o))))
            if progress:
                progress(f'{name} {label}')
    return rows
