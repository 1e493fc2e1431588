"""The rows of the dense evidence (``docs/study.md``, "Dense
prediction"): :data:`DENSE_METHODS_FILE` read by :func:`load_dense_tasks`
into :class:`DenseRow`, and a row's config (:func:`row_config`): its own
file, or for a method row the switch's conversion of its dense reference's
(``accelerate_config``), so that the study measures the model a user gets
from ``tools/accelerate.py``.
"""
import os
import os.path as osp
from dataclasses import dataclass
from typing import Optional

from projects.digits_study.study.training import _slug

__all__ = [
    'DENSE_HOSTS', 'DENSE_METHODS_FILE', 'DenseRow', 'HOST_LAYOUTS',
    'HOST_OPTION', 'SWIN_HOST_CONFIG', 'load_dense_tasks', 'row_config',
    'row_config_file'
]

#: the dense rows, as data (relative to the repository root)
DENSE_METHODS_FILE = 'configs/study/dense/methods.py'

#: the pretrained Swin classifier every Swin row starts from
SWIN_HOST_CONFIG = 'configs/study/dense/swin_host.py'

#: the hosts a row may start from: the digits Swin host and the
#: classification study's DeiT host
DENSE_HOSTS = ('swin', 'deit')

#: the cfg key that receives the pretrained checkpoint of a row's backbone,
#: unless its task names another (``host_option``)
HOST_OPTION = 'model.backbone.init_cfg.checkpoint'

#: how a task's rows read the host: ``'as_trained'`` (the host checkpoint
#: itself, through the backbone's loader) or ``'official'`` (the Swin host
#: written in the official Swin layout, :func:`~.dense.official_host_checkpoint`,
#: which upstream Video Swin inflates as it inflates an ImageNet Swin)
HOST_LAYOUTS = ('as_trained', 'official')

_FIELDS = ('name', 'config', 'method', 'host', 'dgssa_init', 'reference',
           'training_free', 'paper')


@dataclass
class DenseRow:
    """A trained row of the dense evidence: an entry of
    :data:`DENSE_METHODS_FILE`, which documents the fields.

    Attributes:
        task (str): ``'detection'``, ``'segmentation'`` or ``'video'``.
        name (str): the CSV's method column.
        config (str): its config, relative to the repository root; for a
            row of the switch (``method``), its reference's config, which
            :func:`row_config` converts.
        method (str | None): a method of the switch
            (:data:`~mmvitaccel.apis.METHODS`): the row's config is
            ``accelerate_config(reference's config, method)``, the model a
            user gets from ``tools/accelerate.py``; None: ``config`` as it
            is.
        host (str): one of :data:`DENSE_HOSTS`.
        dgssa_init (bool): the backbone starts from ``tools/dgssa_init.py``
            run on the host.
        reference (str | None): the dense row it is compared with.
        training_free (bool): the reference's fine-tuned weights are also
            tested in this row's model with no training.
        paper (str | None): what the method's paper reports for the task.
        host_option (str): the task's cfg key that receives the backbone's
            starting checkpoint.
        host_layout (str): one of :data:`HOST_LAYOUTS`, the task's.
    """
    task: str
    name: str
    config: str
    method: Optional[str]
    host: str
    dgssa_init: bool
    reference: Optional[str]
    training_free: bool
    paper: Optional[str]
    host_option: str = 'model.backbone.init_cfg.checkpoint'
    host_layout: str = 'as_trained'


def load_dense_tasks(path):
    """The tasks of a methods file (``TASKS``): ``{task: (metrics, rows)}``.

    A row of the switch (``method`` set) names no config: it converts its
    reference's, which its :attr:`DenseRow.config` then holds.

    Raises:
        ValueError: an entry with a missing or unknown field, an unknown
            host or method, a row with both or neither of a config and a
            method, a method row without a reference, or a reference that
            is not a dense row of its task.
    """
    from mmengine.config import Config

    from mmvitaccel.switch.placement import METHODS
    tasks = Config.fromfile(path).TASKS
    out = {}
    for task, spec in tasks.items():
        unknown = set(spec) - {'metrics', 'rows', 'host_option',
                               'host_layout'}
        if unknown:
            raise ValueError(f'{path}: task {task} has unknown fields '
                             f'{sorted(unknown)}')
        layout = spec.get('host_layout', 'as_trained')
        if layout not in HOST_LAYOUTS:
            raise ValueError(f'{path}: task {task}: host_layout must be one '
                             f'of {HOST_LAYOUTS}, got {layout!r}')
        shared = dict(host_option=spec.get('host_option', HOST_OPTION),
                      host_layout=layout)
        rows = []
        for entry in spec['rows']:
            if set(entry) != set(_FIELDS):
                raise ValueError(f'{path}: {task} entry {entry.get("name")} '
                                 f'must have exactly the fields {_FIELDS}, '
                                 f'got {sorted(entry)}')
            if entry['host'] not in DENSE_HOSTS:
                raise ValueError(f'{path}: host must be one of '
                                 f'{DENSE_HOSTS}, got {entry["host"]!r}')
            method = entry['method']
            if (entry['config'] is None) == (method is None):
                raise ValueError(f'{path}: {task} row {entry["name"]!r} '
                                 'needs a config or a method (of the '
                                 'switch), not both')
            if method is not None and method not in METHODS:
                raise ValueError(f'{path}: method must be one of '
                                 f'{sorted(METHODS)}, got {method!r}')
            if method is not None and entry['reference'] is None:
                raise ValueError(f'{path}: {task} row {entry["name"]!r}: a '
                                 'method row converts its reference, which '
                                 'it must name')
            rows.append(DenseRow(task=task, **entry, **shared))
        dense = {r.name: r for r in rows if r.reference is None}
        for row in rows:
            if row.reference is not None and row.reference not in dense:
                raise ValueError(f'{path}: {task} row {row.name!r} refers to '
                                 f'{row.reference!r}, which is not a dense '
                                 f'row of the task ({sorted(dense)})')
            if row.method is not None:
                row.config = dense[row.reference].config
        out[task] = (tuple(spec['metrics']), rows)
    return out


def row_config(repo, row, options=None):
    """A row's config with ``options`` merged over it: its file, or for a
    row of the switch the conversion of its reference's,
    ``accelerate_config(config, method)``."""
    from mmvitaccel.switch.accelerate import accelerate_config
    from mmvitaccel.apis.harness import load_config
    path = osp.join(repo, row.config)
    if row.method is None:
        return load_config(path, options)
    cfg = accelerate_config(path, row.method)
    if options:
        cfg.merge_from_dict(options)
    return cfg


def row_config_file(repo, row, folder):
    """A file of the row's config, for the tools that read one: its own
    file, or for a row of the switch what ``tools/accelerate.py`` writes
    (:func:`~mmvitaccel.apis.accelerated_config_text`: its reference's
    config inherited, the backbone replaced) into ``folder``, written anew
    on every call."""
    from mmvitaccel.switch.accelerate import accelerated_config_text
    path = osp.join(repo, row.config)
    if row.method is None:
        return path
    os.makedirs(folder, exist_ok=True)
    out = osp.join(folder, f'{row.task}_{_slug(row.name)}.py')
    text = accelerated_config_text(path, out, row.method)
    tmp = out + '.tmp'
    with open(tmp, 'w') as f:
        f.write(text)
    os.replace(tmp, out)
    return out
