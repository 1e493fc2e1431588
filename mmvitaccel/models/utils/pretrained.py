"""One ``init_weights`` for every backbone: load its host's checkpoint
through a converter with a report, or initialise as the host does."""
from mmengine.logging import MMLogger

from mmvitaccel.models.utils.load_report import load_with_report


class PretrainedMixin:
    """``init_weights`` that loads a host checkpoint with a report, or
    initialises as the upstream host; list it before the host.

    Hooks (class attributes or methods): :attr:`host_state_dict`,
    :attr:`new_parameter_prefixes`, :meth:`adapt_host_state_dict`,
    :meth:`init_new_parameters`, :attr:`host_init_ignores_init_cfg`.
    """

    #: reads a checkpoint (path, URL or loaded dict) into the model's names
    host_state_dict = None

    #: prefixes of the parameters the method adds to the host
    new_parameter_prefixes = ()

    #: hide init_cfg from the host's init (mmdet's Swin loads any init_cfg)
    host_init_ignores_init_cfg = False

    def pretrained_checkpoint(self):
        """``init_cfg['checkpoint']`` of a ``Pretrained`` init_cfg, or None."""
        init_cfg = getattr(self, 'init_cfg', None)
        if isinstance(init_cfg, dict) and \
                init_cfg.get('type') == 'Pretrained':
            return init_cfg['checkpoint']
        return None

    def adapt_host_state_dict(self, state_dict):
        """Model-specific changes to the host's weights; none by default.

        Args:
            state_dict (dict): ``{name: tensor}`` from :attr:`host_state_dict`.

        Returns:
            tuple[dict, Collection[str], list[str] | None]: the state dict;
            names the checkpoint cannot provide (initialised, reported as
            new); notes of what was dropped or folded (None: never converts).
        """
        return state_dict, (), None

    def init_new_parameters(self, fresh=None):
        """Initialise what the method adds; nothing by default.

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
        """Read, adapt, initialise the new parameters, load with a report.

        Args:
            checkpoint (str | dict): a path/URL or a loaded checkpoint.
            logger (MMLogger, optional): where the report goes.

        Returns:
            dict: the report of :func:`load_with_report` (plus ``dropped``
            notes for models that convert), also ``self.load_report``.
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
        """A whole model's backbone state dict (``load_from``) in this
        model's names, read and adapted as :meth:`load_pretrained` does.

        Args:
            state_dict (dict): ``{name: tensor}``, backbone prefix removed.

        Returns:
            tuple[dict, tuple[str], list[str]]: state dict, new, notes.
        """
        if self.host_state_dict is None:
            raise TypeError(f'{type(self).__name__} sets no host_state_dict '
                            f'converter')
        state_dict, fresh, notes = self.adapt_host_state_dict(
            self.host_state_dict(state_dict))
        new = tuple(self.new_parameter_prefixes) + tuple(fresh)
        return state_dict, new, list(notes or [])

    def init_weights(self):
        """Load a ``Pretrained`` init_cfg with a report, or initialise as
        the host; then the new parameters."""
        checkpoint = self.pretrained_checkpoint()
        if checkpoint is not None:
            self.load_pretrained(checkpoint)
        else:
            self.init_host_weights()
            self.init_new_parameters()
