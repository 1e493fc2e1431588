"""Before a runner starts: refuse, in one line, a config whose dataset files
are missing (rather than a traceback from the dataset's loader)."""
import os.path as osp

__all__ = ['DATASETS_DOC', 'data_paths', 'missing_data_message']

#: the docs section on preparing the real datasets
DATASETS_DOC = 'docs/get_started.md#real-datasets'

#: what each run reads: its loaders and evaluators
_READS = {
    'train': ('train_dataloader', 'val_dataloader', 'val_evaluator'),
    'test': ('test_dataloader', 'test_evaluator'),
}


def _local(path):
    """Whether ``path`` is local (not a URL or an ``s3://``-like prefix)."""
    return isinstance(path, str) and bool(path) and '://' not in path


def _joined(root, path):
    """``path`` under ``root`` unless absolute, as the datasets join them."""
    return path if not root or osp.isabs(path) else osp.join(root, path)


def _dataset_paths(dataset, key):
    """The ``(config key, path)`` pairs one dataset config reads, wrappers
    followed: ``data_root``, then ``ann_file`` and ``data_prefix`` entries.

    Args:
        dataset (dict): a dataset config (wrappers hold ``dataset(s)``).
        key (str): its key in the config, e.g. ``'train_dataloader.dataset'``.
    """
    if not isinstance(dataset, dict):
        return
    if isinstance(dataset.get('datasets'), (list, tuple)):
        for i, inner in enumerate(dataset['datasets']):
            yield from _dataset_paths(inner, f'{key}.datasets.{i}')
        return
    if isinstance(dataset.get('dataset'), dict):
        yield from _dataset_paths(dataset['dataset'], f'{key}.dataset')
        return
    backend = (dataset.get('backend_args') or {}).get('backend', 'local')
    if backend not in ('local', 'disk'):
        return  # read through a storage backend: not a local path
    root = dataset.get('data_root') or ''
    if root and not _local(root):
        return
    if root:
        yield f'{key}.data_root', root
    if _local(dataset.get('ann_file')):
        yield f'{key}.ann_file', _joined(root, dataset['ann_file'])
    prefix = dataset.get('data_prefix')
    prefixes = {'': prefix} if isinstance(prefix, str) else (prefix or {})
    for name, value in prefixes.items():
        if _local(value):
            yield (f'{key}.data_prefix' + (f'.{name}' if name else ''),
                   _joined(root, value))


def data_paths(cfg, run='train'):
    """Every local path a run of ``cfg`` reads from its datasets and
    evaluators, in the order a refusal names the first missing one.

    Args:
        cfg (mmengine.Config): the config a tool is about to run.
        run (str): ``'train'`` (train, val loaders; val evaluator), ``'test'``.

    Returns:
        list[tuple[str, str]]: ``(config key, path)`` pairs.
    """
    found = []
    for name in _READS[run]:
        part = cfg.get(name)
        if not part:
            continue
        if name.endswith('_dataloader'):
            found += _dataset_paths(part.get('dataset'), f'{name}.dataset')
            continue
        evaluators = part if isinstance(part, (list, tuple)) else [part]
        for i, evaluator in enumerate(evaluators):
            where = name if len(evaluators) == 1 else f'{name}.{i}'
            if isinstance(evaluator, dict) and \
                    _local(evaluator.get('ann_file')):
                found.append((f'{where}.ann_file', evaluator['ann_file']))
    return found


def missing_data_message(cfg, run='train', tool='train.py'):
    """The one-line refusal for the first missing path of a run, or None.

    Args:
        cfg (mmengine.Config): the config to run.
        run (str): ``'train'`` or ``'test'`` (see :func:`data_paths`).
        tool (str): the tool, as the message names it.
    """
    for key, path in data_paths(cfg, run):
        if not osp.exists(path):
            return (f'{tool}: no dataset at {path!r} (set by {key}; point it '
                    f'at your copy with --cfg-options {key}=PATH, prepare '
                    f'the dataset as {DATASETS_DOC} says, or add --tiny for '
                    'a trial run on generated data)')
    return None
