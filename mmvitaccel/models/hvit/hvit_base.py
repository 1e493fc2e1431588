"""What the hMHSA/cFFN hosts share: deploy switch, checkpoint loading."""
from mmvitaccel.ops import CompactLinear, switch_to_deploy
from mmvitaccel.models.hvit.hmhsa_attention import is_hallucinated
from mmvitaccel.models.hvit.hvit_checkpoint import hallucinated_state_dict
from mmvitaccel.models.utils import PretrainedMixin


def resolve_layers(flag, num, what):
    """Indices switched on by a ``bool | Sequence[int]`` option.

    Args:
        flag (bool | Sequence[int]): ``True`` (all), ``False`` or indices.
        num (int): Number of layers/stages.
        what (str): Option name for messages.

    Returns:
        tuple[int]: Sorted indices.
    """
    if flag is True:
        return tuple(range(num))
    if flag is False or flag is None:
        return ()
    indices = tuple(sorted(set(int(i) for i in flag)))
    bad = [i for i in indices if not 0 <= i < num]
    if bad:
        raise ValueError(f'{what}: indices {bad} out of range 0..{num - 1}')
    return indices


class HViTHostMixin(PretrainedMixin):
    """Deploy switch and host-checkpoint loading for the hMHSA/cFFN hosts.

    A host sets ``self.deploy`` and defines ``read_host_checkpoint`` and,
    optionally, ``_prepare_host_state_dict``.
    """

    def switch_to_deploy(self):
        """Fold every cFFN's branches into one linear each, in place."""
        switch_to_deploy(self)
        self.deploy = True
        return self

    @property
    def new_parameter_prefixes(self):
        """Prefixes of what hMHSA/cFFN add: IHH/CHH filters, cFFN factors."""
        prefixes = []
        for name, module in self.named_modules():
            if is_hallucinated(module):
                prefixes.append(f'{name}.hallucination.')
            elif isinstance(module, CompactLinear):
                prefixes.append(f'{name}.')
        return tuple(prefixes)

    def _prepare_host_state_dict(self, state_dict):
        """Hook for resizing position tables (in place); none by default."""

    def host_state_dict(self, checkpoint):
        """A host checkpoint in this model's names (``qkv`` split).

        Args:
            checkpoint (str | dict): Path/URL or loaded checkpoint.

        Returns:
            OrderedDict: ``{name: tensor}``.
        """
        state_dict = self.read_host_checkpoint(checkpoint)
        self._prepare_host_state_dict(state_dict)
        return hallucinated_state_dict(self, state_dict)

    def load_host_checkpoint(self, checkpoint, logger=None):
        """Load a host checkpoint (:meth:`PretrainedMixin.load_pretrained`).

        Args:
            checkpoint (str | dict): Path/URL or loaded checkpoint.
            logger (MMLogger, optional): Where the report goes.

        Returns:
            dict: The load report, also ``self.load_report``.
        """
        return self.load_pretrained(checkpoint, logger)
