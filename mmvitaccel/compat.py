"""Fixes for known breakages of the OpenMMLab stack (``docs/get_started.md``,
"Environment fixes"), applied by our tools through :func:`apply`, never by
``import mmvitaccel``; each fix is idempotent."""
import functools
import importlib
import importlib.util
import os
import os.path as osp
import pickle
import sys
import types
import warnings

from mmvitaccel.toolboxes import (DRN_PACKAGE, MMCV_OPS_FIX,  # noqa: F401
                                 drn_shim_needed, mmaction_drn_missing,
                                 retry_missing)



class _UnavailableDRN:
    """Stand-in for mmaction's ``DRN`` (not in the 1.2.0 wheel): refuses."""

    def __init__(self, *args, **kwargs):
        raise ImportError(
            'DRN is not included in the mmaction2 1.2.0 wheel '
            '(mmaction/models/localizers/drn is missing). Install mmaction2 '
            'from source to use it; mmvitaccel only shims the import.')


def patch_mmaction_drn():
    """Register placeholder ``drn`` modules so that ``mmaction.models``
    imports (mmaction2 1.2.0 wheel); building ``DRN`` then says why not.

    Returns:
        bool: True if the placeholders are (now) installed.

    Raises:
        RuntimeError: ``mmaction.models`` already failed to import.
    """
    if not mmaction_drn_missing():
        return False
    if DRN_PACKAGE in sys.modules:
        return True
    localizers = sys.modules.get('mmaction.models.localizers')
    if localizers is not None and not hasattr(localizers, 'DRN'):
        raise RuntimeError(
            'mmaction.models was imported (and failed) before mmvitaccel; '
            'import mmvitaccel first so that its DRN shim can be applied.')
    package = types.ModuleType(DRN_PACKAGE)
    package.__path__ = []
    package.__doc__ = 'Placeholder added by mmvitaccel.compat.'
    module = types.ModuleType(DRN_PACKAGE + '.drn')
    module.DRN = _UnavailableDRN
    package.drn = module
    sys.modules[DRN_PACKAGE] = package
    sys.modules[DRN_PACKAGE + '.drn'] = module
    retry_missing()  # our mmaction components, skipped at import
    return True


def _history_buffer_getattr(obj, name):
    """``getattr`` limited to HistoryBuffer's public methods (a plain
    ``getattr`` in the allow-list would be a gadget for any code).

    Args:
        obj: :class:`mmengine.logging.HistoryBuffer`.
        name (str): a public method of it, e.g. ``'mean'``.
    """
    from mmengine.logging import HistoryBuffer
    if (obj is HistoryBuffer and isinstance(name, str)
            and not name.startswith('_')
            and isinstance(vars(HistoryBuffer).get(name),
                           types.FunctionType)):
        return getattr(obj, name)
    raise pickle.UnpicklingError(
        f'mmvitaccel refuses getattr({obj!r}, {name!r}) in a checkpoint; '
        'set TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 only if you trust it.')


def _mmengine_checkpoint_globals():
    """The non-tensor globals of mmengine's runner checkpoints (the message
    hub's ``HistoryBuffer``, numpy arrays and scalars), for the allow-list."""
    import numpy as np
    from mmengine.logging import HistoryBuffer

    try:  # numpy >= 2
        from numpy._core.multiarray import _reconstruct, scalar
    except ImportError:  # numpy 1.x
        from numpy.core.multiarray import _reconstruct, scalar
    # numpy >= 1.25 rebuilds each dtype as an instance of its own class
    dtype_classes = [
        getattr(np.dtypes, name) for name in dir(getattr(np, 'dtypes', ()))
        if name.endswith('DType')
    ]
    return dtype_classes + [
        HistoryBuffer, np.ndarray, np.dtype, _reconstruct, scalar,
        (_history_buffer_getattr, 'builtins.getattr'),
        # checkpoints written under numpy 1.x name numpy.core
        (_reconstruct, 'numpy.core.multiarray._reconstruct'),
        (scalar, 'numpy.core.multiarray.scalar'),
    ]


def allow_mmengine_checkpoints():
    """Allow-list mmengine's own checkpoint contents for ``torch.load``.

    Returns:
        list: the globals that were added (empty on torch without
        ``add_safe_globals``).
    """
    import torch
    add = getattr(torch.serialization, 'add_safe_globals', None)
    if add is None:  # torch < 2.4
        return []
    allowed = _mmengine_checkpoint_globals()
    if not renamed_safe_globals_supported():
        allowed = [g for g in allowed if not isinstance(g, tuple)]
    add(allowed)
    return allowed


def renamed_safe_globals_supported():
    """Whether torch's allow-list takes ``(object, 'module.name')`` entries:
    from 2.6 on (2.4 and 2.5 take them, then fail every load)."""
    import torch
    release = torch.__version__.split('+')[0].split('.')[:2]
    return tuple(int(p) for p in release) >= (2, 6)


class _RestrictedUnpickler(pickle.Unpickler):
    """torch < 2.6: torch's weights-only globals plus mmengine's; no other."""

    def find_class(self, module, name):
        import _compat_pickle  # protocol 2 names, mapped as pickle does
        module, name = _compat_pickle.NAME_MAPPING.get((module, name),
                                                       (module, name))
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        allowed = _restricted_globals()
        full = f'{module}.{name}'
        if full not in allowed:
            raise pickle.UnpicklingError(
                f'mmvitaccel refuses {full} in a checkpoint (it could run '
                'code when unpickled); load it with torch.load(..., '
                'weights_only=False) only if you trust it.')
        return allowed[full]


def _restricted_globals():
    """``{'module.name': object}`` for :class:`_RestrictedUnpickler`."""
    import codecs

    from torch import _weights_only_unpickler
    allowed = dict(_weights_only_unpickler._get_allowed_globals())
    # numpy scalars pickle as _codecs.encode (torch allows it from 2.4 on)
    allowed['_codecs.encode'] = codecs.encode
    for entry in _mmengine_checkpoint_globals():
        obj, name = entry if isinstance(entry, tuple) else \
            (entry, f'{entry.__module__}.{entry.__qualname__}')
        allowed[name] = obj
        if name.startswith('numpy.core.'):  # written under numpy 2
            allowed['numpy._core.' + name[len('numpy.core.'):]] = obj
    return allowed


#: a ``pickle_module`` for ``torch.load`` (see :func:`load_checkpoint_safely`)
RESTRICTED_PICKLE = types.SimpleNamespace(
    Unpickler=_RestrictedUnpickler,
    load=lambda f, **kwargs: _RestrictedUnpickler(f, **kwargs).load(),
    __name__='mmvitaccel.compat.RESTRICTED_PICKLE')


def load_checkpoint_safely(filename, map_location='cpu'):
    """Load a runner checkpoint without running code from it: torch >= 2.6
    ``weights_only=True`` with mmengine's classes allow-listed, before that
    the same allow-list through :data:`RESTRICTED_PICKLE`.

    Args:
        filename (str): a checkpoint file.
        map_location (str): where the tensors go.

    Returns:
        dict: the checkpoint.

    Raises:
        pickle.UnpicklingError: for any other global in the pickle.
    """
    import torch
    if renamed_safe_globals_supported():
        allow_mmengine_checkpoints()
        return torch.load(filename, map_location=map_location,
                          weights_only=True)
    return torch.load(filename, map_location=map_location,
                      weights_only=False, pickle_module=RESTRICTED_PICKLE)


def _cpu_safe_init(init, slurm=False):
    """Wrap an mmengine ``_init_dist_*`` to work without CUDA."""

    @functools.wraps(init)
    def wrapper(backend, *args, **kwargs):
        import torch
        if torch.cuda.is_available():
            return init(backend, *args, **kwargs)
        if backend == 'nccl':
            warnings.warn("dist_cfg.backend='nccl' needs a CUDA device and "
                          "none is available; using 'gloo' instead")
            backend = 'gloo'
        if slurm:  # else mmengine computes SLURM_PROCID % device_count() == % 0
            os.environ.setdefault('SLURM_LOCALID', '0')
        set_device = torch.cuda.set_device
        torch.cuda.set_device = lambda device: None
        try:
            return init(backend, *args, **kwargs)
        finally:
            torch.cuda.set_device = set_device

    wrapper._mmvitaccel_cpu_safe = True
    return wrapper


def allow_cpu_distributed():
    """Make mmengine's ``pytorch``/``slurm`` launchers and DDP wrapper work
    without CUDA (gloo; SyncBN as BN on the CPU). Idempotent.

    Returns:
        bool: True if the wrappers were installed by this call.
    """
    import torch
    from mmengine.dist import utils as dist_utils
    from mmengine.model import (MMDistributedDataParallel,
                                revert_sync_batchnorm)
    if getattr(dist_utils._init_dist_pytorch, '_mmvitaccel_cpu_safe', False):
        return False
    dist_utils._init_dist_pytorch = _cpu_safe_init(
        dist_utils._init_dist_pytorch)
    dist_utils._init_dist_slurm = _cpu_safe_init(
        dist_utils._init_dist_slurm, slurm=True)
    ddp_init = MMDistributedDataParallel.__init__

    @functools.wraps(ddp_init)
    def __init__(self, module, *args, **kwargs):
        if all(p.device.type == 'cpu' for p in module.parameters()):
            kwargs['device_ids'] = None  # torch refuses device ids for CPU modules
            if any(isinstance(m, torch.nn.SyncBatchNorm) for m in module.modules()):
                warnings.warn('SyncBatchNorm needs CUDA: on the CPU its layers '
                              'run as BatchNorm, with per-process statistics')
                module = revert_sync_batchnorm(module)
        ddp_init(self, module, *args, **kwargs)

    MMDistributedDataParallel.__init__ = __init__
    return True


class _ExplicitCheckpointModule(types.ModuleType):
    """``torch.utils.checkpoint`` for an upstream module, whose
    ``checkpoint`` passes ``use_reentrant=False`` unless told otherwise."""

    def __getattr__(self, name):
        import torch.utils.checkpoint
        return getattr(torch.utils.checkpoint, name)

    @staticmethod
    def checkpoint(function, *args, use_reentrant=False, **kwargs):
        import torch.utils.checkpoint  # looked up per call: spies see it
        return torch.utils.checkpoint.checkpoint(
            function, *args, use_reentrant=use_reentrant, **kwargs)


#: the stand-in bound by :func:`explicit_checkpoint_reentrancy`
EXPLICIT_CHECKPOINT = _ExplicitCheckpointModule('torch.utils.checkpoint')

#: upstream module -> its name for torch.utils.checkpoint (``with_cp`` blocks)
CHECKPOINTING_UPSTREAM = {
    'mmpretrain.models.backbones.swin_transformer': 'cp',
    'mmdet.models.backbones.swin': 'cp',
    'mmseg.models.backbones.swin': 'cp',
    'mmseg.models.backbones.vit': 'cp',
    'mmaction.models.backbones.swin': 'checkpoint',
}


def explicit_checkpoint_reentrancy():
    """Bind :data:`EXPLICIT_CHECKPOINT` in the installed modules of
    :data:`CHECKPOINTING_UPSTREAM`.

    Returns:
        list[str]: the modules patched.
    """
    import torch.utils.checkpoint
    patched = []
    for name, attr in CHECKPOINTING_UPSTREAM.items():
        if importlib.util.find_spec(name.split('.')[0]) is None:
            continue
        try:
            module = importlib.import_module(name)
        except Exception:  # noqa: B902 (a toolbox that does not import)
            continue
        current = getattr(module, attr, None)
        if current is torch.utils.checkpoint or \
                current is EXPLICIT_CHECKPOINT:
            setattr(module, attr, EXPLICIT_CHECKPOINT)
            patched.append(name)
    return patched


def apply():
    """Apply every fix of this module (none if ``MMVITACCEL_NO_COMPAT=1``).

    Returns:
        bool: True if the fixes were applied.
    """
    if os.environ.get('MMVITACCEL_NO_COMPAT') == '1':
        return False
    patch_mmaction_drn()
    allow_mmengine_checkpoints()
    allow_cpu_distributed()
    explicit_checkpoint_reentrancy()
    retry_missing()  # components skipped before the mmaction fix
    return True
