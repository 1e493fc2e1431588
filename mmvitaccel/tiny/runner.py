"""A runner that applies the tiny overlay before building itself."""
from mmengine.runner import Runner

from mmvitaccel.registry import RUNNERS
from mmvitaccel.tiny.overlay import tinyfy_config


@RUNNERS.register_module()
class TinyRunner(Runner):
    """:class:`mmengine.runner.Runner` on tiny generated data at CPU scale.

    Selecting it with ``runner_type='mmvitaccel.TinyRunner'`` (in a config or
    via ``--cfg-options``) runs any config through
    :func:`mmvitaccel.tiny.tinyfy_config`, which makes the overlay
    available to tools that know nothing about mmvitaccel, e.g. mmdet's
    packaged ``tools/train.py`` or ``mim train``. Options are read from the
    config's ``tiny`` dict.
    """

    @classmethod
    def from_cfg(cls, cfg):
        """Build the runner from the tiny version of ``cfg``.

        Args:
            cfg (Config): a full runner config.

        Returns:
            TinyRunner: the runner.
        """
        return super().from_cfg(tinyfy_config(cfg))
