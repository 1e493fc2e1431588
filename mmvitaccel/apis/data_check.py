"""Before a runner starts: the dataset files a config reads are there.

Without this, ``tools/train.py`` on a machine without COCO ends, after the
model is built, in a long traceback from the dataset's loader. Our tools
read the config's dataset and evaluator paths first (:func:`data_paths`)
and refuse a missing one in one line (:func:`missing_data_message`).
"""
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
    """Args: path (str). Returns: bool: a path on this machine (not a URL
    or a storage backend's prefix such as ``s3://``)."""
    return isinstance(path, str) and bool(path) and '://' not in path


def _joined(root, path):
    """Args: root (str): a ``data_root`` ('' for none). path (str).
    Returns: str: ``path`` under ``root`` unless absolute, as the
    toolboxes' datasets join them."""
    return path if not root or osp.isabs(path) else osp.join(root, path)


def _dataset_paths(dataset, key):
    """The paths one dataset config reads, wrappers followed.

    Args:
        dataset (dict): a dataset config (``RepeatDataset``,
            ``ConcatDataset`` and the like wrap others in ``dataset`` or
            ``datasets``).
        key (str): its key in the config, e.g.
            ``'train_dataloader.dataset'``.

    Yields:
        tuple[str, str]: ``(config key, path)``: ``data_root`` first, then
        ``ann_file`` and every ``data_prefix`` entry joined to it.
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
        run (str): ``'train'`` (train and val loaders, val evaluator) or
            ``'test'`` (test loader and evaluator).

    Returns:
        list[tuple[str, str]]: ``(config key, path)`` pairs, e.g.
        ``('train_dataloader.dataset.data_root', 'data/coco/')``.
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

    Returns:
        str | None: names the path, the key that sets it, the docs section
        on preparing the dataset and ``--tiny``; None if every path exists.
    """
    for key, path in data_paths(cfg, run):
        if not osp.exists(path):
            return (f'{tool}: no dataset at {path!r} (set by {key}; point it '
                    f'at your copy with --cfg-options {key}=PATH, prepare '
                    f'the dataset as {DATASETS_DOC} says, or add --tiny for '
                    'a trial run on generated data)')
    return None
