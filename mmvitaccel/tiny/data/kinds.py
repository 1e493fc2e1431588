"""The tiny dataset kinds, and where a ready dataset of each kind lives."""
import os
import os.path as osp

from mmvitaccel.tiny.data.ade20k import make_tiny_ade20k
from mmvitaccel.tiny.data.coco import make_tiny_coco
from mmvitaccel.tiny.data.common import FORMAT_VERSION, _read_marker
from mmvitaccel.tiny.data.imagenet import make_tiny_imagenet
from mmvitaccel.tiny.data.kinetics import make_tiny_kinetics

ENV_ROOT = 'MMVITACCEL_TINY_DATA'

#: Dataset kinds: name -> (generator, keyword arguments).
TINY_DATA_KINDS = {
    'imagenet': (make_tiny_imagenet, {}),
    'tinyimagenet': (make_tiny_imagenet,
                     dict(
                         num_classes=200,
                         num_train_per_class=8,
                         num_val_per_class=2,
                         img_size=64)),
    'coco': (make_tiny_coco, {}),
    'ade20k': (make_tiny_ade20k, {}),
    'kinetics': (make_tiny_kinetics, {}),
}


def make_tiny_data(kind, root, seed=0):
    """Generate the tiny dataset of one kind with its default sizes.

    Args:
        kind (str): One of :data:`TINY_DATA_KINDS`: ``'imagenet'``,
            ``'tinyimagenet'`` (200 classes of 64x64 images), ``'coco'``,
            ``'ade20k'`` or ``'kinetics'``.
        root (str): Output directory of this dataset.
        seed (int): Random seed.

    Returns:
        str: The absolute path of ``root``.
    """
    if kind not in TINY_DATA_KINDS:
        raise KeyError(f'unknown tiny dataset kind {kind!r}; expected one of '
                       f'{sorted(TINY_DATA_KINDS)}')
    make, kwargs = TINY_DATA_KINDS[kind]
    return make(root, seed=seed, **kwargs)


def default_tiny_data_dir():
    """The parent directory of the tiny datasets.

    Returns:
        str: The ``MMVITACCEL_TINY_DATA`` environment variable if set, else
        ``<cwd>/data/tiny``.
    """
    return os.environ.get(ENV_ROOT) or osp.join(os.getcwd(), 'data', 'tiny')


def tiny_data_root(kind, root=None):
    """Return the path of a ready tiny dataset, generating it if needed.

    The dataset lives in ``<root>/<kind>``. A complete dataset already
    there is used as it is, whatever seed and sizes it was made
    with (e.g. by ``tools/data/make_tiny_data.py --seed 3``); otherwise it
    is generated with seed 0 and the default sizes of
    :func:`make_tiny_data`.

    Args:
        kind (str): One of :data:`TINY_DATA_KINDS`.
        root (str, optional): Parent directory of the tiny datasets.
            Defaults to :func:`default_tiny_data_dir`.

    Returns:
        str: The absolute dataset directory.
    """
    if root is None:
        root = default_tiny_data_dir()
    path = osp.abspath(osp.join(root, kind))
    marker = _read_marker(path)
    if marker is not None and marker.get('format_version') == FORMAT_VERSION:
        return path  # complete (the marker is written last)
    return make_tiny_data(kind, path)
