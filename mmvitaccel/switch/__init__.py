"""The switch: an upstream config in, the same config with one of our
methods in place of its backbone out (``docs/accelerate.md``).

:mod:`.accelerate` writes the config, :mod:`.hosts` and :mod:`.swin_hosts`
read the host backbone's arguments, :mod:`.placement` and
:mod:`.vit_placement` hold each method's placement rule scaled to the
host's depth, and :mod:`.switch_options` checks ``--options`` before
anything is written.
"""
from mmvitaccel.switch.accelerate import accelerate_config, checked_hooks
from mmvitaccel.switch.hosts import find_host
from mmvitaccel.switch.placement import METHODS

__all__ = ['METHODS', 'accelerate_config', 'checked_hooks', 'find_host']
