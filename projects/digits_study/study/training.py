"""Training and caching the study's models: the host (:func:`host_checkpoint`)
and the trained methods, the entries of ``configs/study/methods.py`` read
by :func:`load_methods` into :class:`StudyMethod` (:func:`method_checkpoint`
trains one per seed, running the tools an entry asks for).

Checkpoints are cached under a folder named by :func:`config_key`, a hash of
the config's text and the seed: a change of the code alone does not
invalidate them (a config that depends on a new default should set it).
"""
import copy
import hashlib
import json
import os
import os.path as osp
import uuid
from dataclasses import dataclass, field
from typing import Optional

import torch

__all__ = [
    'INITS', 'METHODS_FILE', 'StudyMethod', 'TRAIN_RECORD', 'config_key',
    'host_checkpoint', 'load_methods', 'method_checkpoint', 'parallel_map',
    'read_search', 'run_tool', 'setting_label', 'train_record'
]

#: How a trained method starts: the host's weights (``load_from``), a
#: DGSSA checkpoint made by ``tools/dgssa_init.py`` from the host, or
#: random initialisation.
INITS = ('host', 'dgssa_init', 'scratch')


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
        prefer (dict, optional): ``setting``, ``over`` and ``within``: two
            of ``settings`` and a top-1 margin; the short table shows
            ``setting`` instead of ``over`` when it is faster and within the
            margin (:func:`~.report.choose_summary`).
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
    prefer: Optional[dict] = None

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
        if self.prefer is not None and (
                set(self.prefer) != {'setting', 'over', 'within'} or
                not {self.prefer['setting'], self.prefer['over']} <= set(
                    self.settings)):
            raise ValueError('prefer must give setting, over (two of the '
                             f'settings {sorted(self.settings)}) and within, '
                             f'got {self.prefer}')
        if self.search is not None and self.init == 'scratch':
            raise ValueError('search runs on the host: init=\'scratch\' '
                             'has none')


#: What :func:`_train` writes beside the weights: every step's gradient norm.
TRAIN_RECORD = 'train_record.json'

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


def _train(cfg, work_dir, seed, keep_every=None):
    """Train ``cfg`` with mmengine's runner into ``work_dir``; return the
    path of the final weights (written atomically, so that an interrupted
    run leaves no checkpoint that looks complete).

    ``keep_every`` (int, optional) also keeps the weights every so many
    epochs (``epoch_{n}.pth``, mmengine's names; no optimizer state), for a
    learning curve; it is not part of the cached run's key."""
    from mmengine.runner import Runner
    final = osp.join(work_dir, 'final.pth')
    cfg = copy.deepcopy(cfg)
    cfg.work_dir = work_dir
    cfg.randomness = dict(seed=seed, deterministic=False)
    cfg.default_hooks.checkpoint = dict(
        type='CheckpointHook', interval=keep_every or -1, by_epoch=True,
        save_last=False, save_optimizer=False, save_param_scheduler=False)
    # mmengine shares a message hub between runners of one experiment name
    # (the config's file name and the second it started): a unique name
    # keeps another run's gradient norms out of this run's record
    cfg.experiment_name = f'{osp.basename(work_dir)}_{uuid.uuid4().hex[:8]}'
    runner = Runner.from_cfg(cfg)
    runner.train()
    # every step's gradient norm before clipping (the optimizer wrapper's
    # record; the log shows windowed means), kept beside the weights
    norms = runner.message_hub.log_scalars.get('train/grad_norm')
    steps = [float(v) for v in norms.data[0]] if norms is not None else []
    with open(osp.join(work_dir, TRAIN_RECORD), 'w') as f:
        json.dump(dict(steps=len(steps),
                       max_grad_norm=max(steps, default=None),
                       grad_norms=steps), f)
    tmp = final + '.tmp'
    torch.save(dict(state_dict=runner.model.state_dict(),
                    meta=dict(seed=seed, epoch=runner.epoch)), tmp)
    os.replace(tmp, final)
    return final


def parallel_map(fn, calls, workers=1):
    """``[fn(*args) for args in calls]``, in order, in ``workers`` spawned
    processes when ``workers > 1``.

    Each process gets ``torch.get_num_threads() // workers`` threads (at
    least one), so that the processes share the cores instead of
    oversubscribing them. Training the dense study's detectors this way, two
    single-threaded runs at once on 2 cores gave 1.6 times the throughput
    of one run on both (1.65 s a step each against 1.31 s; much of a
    Cascade Mask R-CNN step is single-threaded). A run's floats then come
    from single-threaded kernels: equal in law, not in bits, to a run on
    two threads.

    Args:
        fn (Callable): a module-level function (picklable).
        calls (list[tuple]): one argument tuple per call.
        workers (int): processes; 1 runs the calls here, one by one.

    Returns:
        list: the results, in the order of ``calls``.
    """
    if workers < 1:
        raise ValueError(f'workers must be >= 1, got {workers}')
    if workers == 1 or len(calls) <= 1:
        return [fn(*args) for args in calls]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    threads = max(1, torch.get_num_threads() // workers)
    with ProcessPoolExecutor(
            min(workers, len(calls)),
            mp_context=multiprocessing.get_context('spawn'),
            initializer=torch.set_num_threads,
            initargs=(threads, )) as pool:
        futures = [pool.submit(fn, *args) for args in calls]
        return [f.result() for f in futures]


def train_record(checkpoint):
    """What :func:`_train` recorded beside a checkpoint (the same folder):
    ``steps``, ``max_grad_norm`` (None when the run clipped nothing, or for
    runs made before the record existed: then ``{}``) and ``grad_norms``."""
    path = osp.join(osp.dirname(checkpoint), TRAIN_RECORD)
    if not osp.isfile(path):
        return {}
    with open(path) as f:
        return json.load(f)


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
    to ``log``, on this process's torch threads (a :func:`parallel_map`
    worker's share); raise with the log's tail if it fails."""
    import subprocess
    import sys
    cmd = [sys.executable, osp.join(repo, tool)] + [str(a) for a in args]
    os.makedirs(osp.dirname(osp.abspath(log)), exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(torch.get_num_threads()))
    with open(log, 'w') as f:
        done = subprocess.run(cmd, cwd=repo, stdout=f, env=env,
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
    from mmvitaccel.apis.harness import load_config
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
