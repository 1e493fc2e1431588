"""One way for every backbone to load its host's pretrained weights.

A backbone of this package subclasses an upstream host (mmdet's Swin,
mmpretrain's ViT, mmaction's Video Swin, ...), changes some of its layers
and adds parameters. :class:`PretrainedMixin` gives all of them the same
``init_weights``:

* ``init_cfg=dict(type='Pretrained', checkpoint=...)``: the checkpoint is
  read with the class's :attr:`~PretrainedMixin.host_state_dict` converter
  (any supported layout, in the model's names), adapted by
  :meth:`~PretrainedMixin.adapt_host_state_dict` (position tables resized,
  the host's Q/K turned into static logits, ...), the parameters the
  checkpoint cannot provide are initialised
  (:meth:`~PretrainedMixin.init_new_parameters`), and the weights are loaded
  with :func:`~mmvitaccel.models.utils.load_with_report`; the report is kept
  as ``self.load_report`` (with ``dropped``, the conversion notes, when the
  adaptation made any);
* otherwise: initialised as the upstream host does
  (:meth:`~PretrainedMixin.init_host_weights`), then the new parameters.

A subclass lists the mixin before its host, ``class X(PretrainedMixin,
Host)``, and overrides only the hooks it needs.
"""
from mmengine.logging import MMLogger

from mmvitaccel.models.utils.load_report import load_with_report


class PretrainedMixin:
    """``init_weights`` that loads a host checkpoint with a report, or
    initialises as the upstream host.

    Hooks (class attributes or methods of the subclass):

    * :attr:`host_state_dict`: ``checkpoint -> state dict`` in the model's
      names (a ``staticmethod`` of a reader in
      :mod:`mmvitaccel.models.utils.checkpoint`, or a method);
    * :attr:`new_parameter_prefixes`: name prefixes of the parameters the
      method adds to the host (reported as *new*, not *missing*);
    * :meth:`adapt_host_state_dict`: model-specific changes to the read
      state dict;
    * :meth:`init_new_parameters`: initialisation of what the method adds;
    * :attr:`host_init_ignores_init_cfg`: hide a non-``Pretrained``
      ``init_cfg`` from the host's ``init_weights`` (mmdet's Swin reads any
      ``init_cfg`` as a checkpoint).
    """

    #: reads a checkpoint (path, URL or loaded dict) into the model's names
    host_state_dict = None

    #: prefixes of the parameters the method adds to the host
    new_parameter_prefixes = ()

    #: initialise as the host with ``init_cfg`` set to None
    host_init_ignores_init_cfg = False

    def pretrained_checkpoint(self):
        """The checkpoint to load, or None to initialise from scratch.

        Returns:
            str | dict | None: ``init_cfg['checkpoint']`` when ``init_cfg``
            is ``dict(type='Pretrained', ...)``, else None.
        """
        init_cfg = getattr(self, 'init_cfg', None)
        if isinstance(init_cfg, dict) and \
                init_cfg.get('type') == 'Pretrained':
            return init_cfg['checkpoint']
        return None

    def adapt_host_state_dict(self, state_dict):
        """Model-specific changes to the host's weights; none by default.

        Args:
            state_dict (dict): ``{name: tensor}`` from
                :attr:`host_state_dict`.

        Returns:
            tuple[dict, Collection[str], list[str] | None]: the state dict;
            the names of parameters initialised by
            :meth:`init_new_parameters` because the checkpoint does not
            provide them (reported as new besides
            :attr:`new_parameter_prefixes`); the notes of what was dropped
            or folded (``load_report['dropped']``), or None when the model
            never converts anything (no ``dropped`` entry then).
        """
        return state_dict, (), None

    def init_new_parameters(self, fresh=None):
        """Initialise what the method adds to the host; nothing by default.

        Args:
            fresh (Collection[str] | None): None from scratch; when loading,
                the names :meth:`adapt_host_state_dict` returned.
        """

    def init_host_weights(self):
        """Initialise as the upstream host does from scratch."""
        if not self.host_init_ignores_init_cfg:
            super().init_weights()
            return
        init_cfg, self.init_cfg = self.init_cfg, None
        try:
            super().init_weights()
        finally:
            self.init_cfg = init_cfg

    def load_pretrained(self, checkpoint, logger=None):
        """Load a host checkpoint: read, adapt, initialise the new
        parameters, load with a report.

        Args:
            checkpoint (str | dict): a path/URL or a loaded checkpoint in
                any layout :attr:`host_state_dict` reads.
            logger (MMLogger, optional): where the report goes.

        Returns:
            dict: the report (``loaded``, ``new``, ``missing``, ``unused``,
            ``mismatched`` key lists, each tensor of the model in one of
            them but ``unused``, and ``dropped`` notes for models that
            convert), also kept as ``self.load_report``.
        """
        if self.host_state_dict is None:
            raise TypeError(f'{type(self).__name__} sets no host_state_dict '
                            f'converter, so it cannot load a checkpoint')
        state_dict = self.host_state_dict(checkpoint)
        state_dict, fresh, notes = self.adapt_host_state_dict(state_dict)
        self.init_new_parameters(fresh)
        report = load_with_report(
            self, state_dict,
            tuple(self.new_parameter_prefixes) + tuple(fresh), logger)
        if notes is not None:
            report['dropped'] = list(notes)
            if notes:
                logger = logger or MMLogger.get_current_instance()
                logger.warning(f'{type(self).__name__}: {len(notes)} '
                               f'conversions: ' + '; '.join(notes))
        self.load_report = report
        return report

    def host_layout_state_dict(self, state_dict):
        """The backbone part of a whole upstream model's state dict (a
        runner's ``load_from``) in this model's names: read by
        :attr:`host_state_dict` and adapted, as :meth:`load_pretrained`
        does, without loading it.

        Args:
            state_dict (dict): ``{name: tensor}`` without the backbone's
                prefix.

        Returns:
            tuple[dict, tuple[str], list[str]]: the state dict, the names
            the checkpoint does not provide (new), and the conversion notes.
        """
        if self.host_state_dict is None:
            raise TypeError(f'{type(self).__name__} sets no host_state_dict '
                            f'converter')
        state_dict, fresh, notes = self.adapt_host_state_dict(
            self.host_state_dict(state_dict))
        new = tuple(self.new_parameter_prefixes) + tuple(fresh)
        return state_dict, new, list(notes or [])

    def init_weights(self):
        """Load ``init_cfg=dict(type='Pretrained', checkpoint=...)`` with a
        report (``self.load_report``), or initialise as the upstream host
        and then the new parameters."""
        checkpoint = self.pretrained_checkpoint()
        if checkpoint is not None:
            self.load_pretrained(checkpoint)
        else:
            self.init_host_weights()
            self.init_new_parameters()
