"""What the hMHSA/cFFN hosts share: deploy switch, checkpoint loading.

The hosts (``HViTDeiT``, ``HViTSwinTransformer``,
``HViTPyramidVisionTransformerV2``) subclass an upstream backbone and swap
some of its attention layers for hMHSA and some FFN output projections for
cFFN. This mixin gives them:

* :meth:`switch_to_deploy`: fold every cFFN branch set into one linear
  (identical outputs in eval mode);
* :meth:`load_host_checkpoint`: read an upstream checkpoint, map fused
  ``qkv`` projections onto hMHSA layers, load it non-strictly and keep a
  report (``self.load_report``) of new, missing, unused and mismatched
  keys, through :class:`~mmvitaccel.models.utils.PretrainedMixin`.
"""
from mmvitaccel.ops import CompactLinear, switch_to_deploy
from mmvitaccel.models.hvit.hmhsa_attention import is_hallucinated
from mmvitaccel.models.hvit.hvit_checkpoint import hallucinated_state_dict
from mmvitaccel.models.utils import PretrainedMixin


def resolve_layers(flag, num, what):
    """Indices switched on by a ``bool | Sequence[int]`` option.

    Args:
        flag (bool | Sequence[int]): ``True`` (all), ``False`` (none), or
            0-based indices.
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

    ``init_weights`` is :class:`PretrainedMixin`'s: as the upstream host
    from scratch, or from a host checkpoint
    (``init_cfg=dict(type='Pretrained', checkpoint=...)``) with a load
    report; hMHSA/cFFN add nothing that needs initialising besides what
    their constructors set. A host sets ``self.deploy`` and defines
    ``read_host_checkpoint`` (a static checkpoint reader returning weights
    in the host's names) and, optionally,
    ``_prepare_host_state_dict(state_dict)`` (resizing of position tables).
    """

    def switch_to_deploy(self):
        """Fold the (1x1 conv + BN) branches of every cFFN into single
        linear layers, in place; eval-mode outputs do not change."""
        switch_to_deploy(self)
        self.deploy = True
        return self

    @property
    def new_parameter_prefixes(self):
        """Name prefixes of what hMHSA/cFFN add to the host: the IHH/CHH
        filters and the cFFN factors."""
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
        """A host checkpoint in this model's names: read, position tables
        resized, fused ``qkv`` split onto the hMHSA layers.

        Args:
            checkpoint (str | dict): Path/URL or loaded checkpoint.

        Returns:
            OrderedDict: ``{name: tensor}`` for ``load_with_report`` (also
            what ``tools/model_converters/convert_checkpoint.py`` uses).
        """
        state_dict = self.read_host_checkpoint(checkpoint)
        self._prepare_host_state_dict(state_dict)
        return hallucinated_state_dict(self, state_dict)

    def load_host_checkpoint(self, checkpoint, logger=None):
        """Initialise from a host (or hMHSA/cFFN) checkpoint
        (:meth:`PretrainedMixin.load_pretrained`).

        Args:
            checkpoint (str | dict): Path/URL or loaded checkpoint in any
                layout ``host_state_dict`` reads.
            logger (MMLogger, optional): Where the report goes.

        Returns:
            dict: The report (``loaded``, ``new``, ``missing``, ``unused``,
            ``mismatched`` key lists), also kept as ``self.load_report``.
        """
        return self.load_pretrained(checkpoint, logger)
