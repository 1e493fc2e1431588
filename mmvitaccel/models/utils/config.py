"""Config files named the OpenMMLab way (``toolbox::path``)."""
import os.path as osp

from mmengine.config import Config
from mmengine.utils import get_installed_path


def config_path(config):
    """The file behind a config name.

    Args:
        config (str): a path, or ``'toolbox::relative/path.py'`` as ``mim``
            names it (``'mmpretrain::deit/deit-small_4xb256_in1k.py'``).
    """
    if '::' not in config:
        return config
    package, rel_path = config.split('::', 1)
    return osp.join(get_installed_path(package), '.mim', 'configs', rel_path)


def load_config_file(config, cfg_options=None):
    """Load a config file, also given as ``toolbox::relative/path.py``.

    Args:
        config (str): a path or a ``toolbox::`` name (:func:`config_path`).
        cfg_options (dict, optional): overrides merged into the config.
    """
    cfg = Config.fromfile(config_path(config))
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    return cfg
