"""Fixes for known breakages of the OpenMMLab stack, for our tools and for
whoever calls them explicitly.

``import mmvitaccel`` applies none of them: a user who adds one of our
components to an upstream model gets upstream's behaviour everywhere else.
Our tools (``tools/*.py``) and the test harness call :func:`apply` first;
a user's own script can do the same::

    from mmvitaccel import compat
    compat.apply()

or pick single fixes (each function below is idempotent). Which fix does
what, and what each costs a user who does not apply it, is in
``docs/get_started.md``.

1. **mmaction2 1.2.0 wheel lacks ``mmaction/models/localizers/drn``.**
   ``mmaction/models/localizers/__init__.py`` does ``from .drn.drn import DRN``,
   so ``import mmaction.models`` fails. :func:`patch_mmaction_drn` registers
   two placeholder modules in :data:`sys.modules` *before* mmaction is
   imported. Their ``DRN`` raises a clear :class:`ImportError` when built;
   every other mmaction model works unchanged. Nothing is done when the
   package is complete (e.g. installed from source).

2. **torch >= 2.6 loads checkpoints with ``weights_only=True`` by default,
   and mmengine 0.10.7 calls ``torch.load`` without the argument.**
   Checkpoints written by mmengine's runner carry a ``message_hub`` of
   :class:`~mmengine.logging.HistoryBuffer` objects and numpy arrays, which
   the safe unpickler refuses, so ``--resume`` and ``load_from`` break.
   :func:`allow_mmengine_checkpoints` adds exactly those classes to torch's
   allow-list (:func:`torch.serialization.add_safe_globals`). A
   ``HistoryBuffer`` pickles its statistics methods as
   ``getattr(HistoryBuffer, 'mean')``; plain ``getattr`` would be a gadget
   for arbitrary code, so the name ``builtins.getattr`` is bound to
   :func:`_history_buffer_getattr`, which only returns HistoryBuffer's own
   methods. Safety stays on: any other global in a pickle is still refused. A user who trusts a
   checkpoint that needs more can opt in with torch's own switch,
   ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``. Entries under another name
   (``(function, 'builtins.getattr')``) are accepted by torch 2.6 and
   later only: torch 2.4 and 2.5 take them but then fail every load with
   ``'tuple' object has no attribute '__module__'``, so there they are
   left out (those versions load with ``weights_only=False`` by default;
   only an explicit ``weights_only=True`` load of a message hub fails).
   torch < 2.4 has no allow-list, and nothing is added.

3. **mmcv without its compiled ops** (``mmcv-lite``, or an sdist built
   without ``MMCV_WITH_OPS=1``) makes mmdet, mmseg and mmaction2 fail deep
   inside their imports with ``No module named 'mmcv._ext'``. Their
   components of ours then stand in (:mod:`mmvitaccel.toolboxes`), and
   building one names :data:`MMCV_OPS_FIX`; nothing is applied here.

4. **mmengine 0.10.7's launchers assume CUDA.** ``_init_dist_pytorch`` and
   ``_init_dist_slurm`` call ``torch.cuda.set_device`` (the slurm one also
   divides by ``torch.cuda.device_count()``), and ``Runner.wrap_model``
   passes ``device_ids=[LOCAL_RANK]`` to DDP, which torch refuses for a CPU
   module. So ``--launcher pytorch`` or ``slurm`` fails with "Found no NVIDIA
   driver" on a machine without a GPU, even with ``backend='gloo'``.
   :func:`allow_cpu_distributed` wraps both initialisers so that, only when
   no CUDA device exists, ``set_device`` is skipped and ``nccl`` (which
   needs a GPU) becomes ``gloo`` with a warning, and makes DDP drop
   ``device_ids`` for a module whose parameters are on the CPU, where it
   also turns SyncBatchNorm (which torch runs on GPUs only; mmdet's Cascade
   heads use it) into BatchNorm with a warning. Only a module whose
   parameters are all on the CPU is changed: on CUDA, NPU, MLU or MUSA
   devices DDP gets its ``device_ids`` and SyncBatchNorm stays.

5. **The upstream Swin blocks call ``torch.utils.checkpoint.checkpoint``
   without ``use_reentrant``** (mmpretrain's, mmdet's and mmseg's Swin,
   mmseg's ViT, mmaction2's Video Swin, under ``with_cp=True``). torch warns
   on every such call and says that it will become an error.
   :func:`explicit_checkpoint_reentrancy` rebinds the ``torch.utils.checkpoint``
   module name in exactly those upstream modules to
   :data:`EXPLICIT_CHECKPOINT`, whose ``checkpoint`` passes
   ``use_reentrant=False`` (torch's recommendation, and what our own blocks
   pass): the gradients are the same; unlike the reentrant form it also
   gives parameter gradients when a block's input needs none (a frozen
   stage before it). Nothing in torch itself is changed.
"""
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
    """Stand-in for ``mmaction.models.localizers.drn.drn.DRN``.

    The mmaction2 1.2.0 wheel does not ship DRN's sources, so this class
    only explains that when somebody tries to build it.
    """

    def __init__(self, *args, **kwargs):
        raise ImportError(
            'DRN is not included in the mmaction2 1.2.0 wheel '
            '(mmaction/models/localizers/drn is missing). Install mmaction2 '
            'from source to use it; mmvitaccel only shims the import.')


def patch_mmaction_drn():
    """Register placeholder ``drn`` modules so ``mmaction.models`` imports.

    Returns:
        bool: True if the placeholders are (now) installed.

    Raises:
        RuntimeError: if ``mmaction.models`` was already imported and failed
            before this ran (the import must come after mmvitaccel's).
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
    """``getattr`` restricted to what a pickled HistoryBuffer needs.

    Args:
        obj: must be :class:`mmengine.logging.HistoryBuffer`.
        name (str): a public method of it, e.g. ``'mean'``.

    Returns:
        function: ``HistoryBuffer.<name>``.
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
    """The non-tensor globals that mmengine's runner pickles in checkpoints
    (checked with ``torch.serialization.get_unsafe_globals_in_checkpoint``
    on a runner checkpoint): the message hub's ``HistoryBuffer`` and its
    methods, and numpy arrays and scalars.

    Returns:
        list: entries for :func:`torch.serialization.add_safe_globals`.
    """
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
    """Whether torch's allow-list takes ``(object, 'module.name')`` entries.

    Returns:
        bool: True from torch 2.6 on (see the module docstring, item 2).
    """
    import torch
    release = torch.__version__.split('+')[0].split('.')[:2]
    return tuple(int(p) for p in release) >= (2, 6)


class _RestrictedUnpickler(pickle.Unpickler):
    """torch < 2.6: what ``torch.load(weights_only=True)`` allows (torch's
    own list for tensors and storages) plus mmengine's checkpoint globals
    (:func:`_mmengine_checkpoint_globals`); any other global is refused."""

    def find_class(self, module, name):
        import _compat_pickle  # protocol 2 names (``__builtin__``), as
        # pickle's own find_class maps them
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
    # numpy scalars pickle their bytes as _codecs.encode(text, 'latin1'),
    # which torch's own list allows from 2.4 on
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
    """Load a runner checkpoint without running code from it.

    From torch 2.6 on, ``torch.load(weights_only=True)`` with mmengine's
    classes allow-listed (:func:`allow_mmengine_checkpoints`); before, the
    same allow-list through our restricted unpickler (torch < 2.6 loads
    with ``weights_only=False`` by default, and cannot allow-list the
    message hub's ``getattr``).

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
    """Wrap an mmengine ``_init_dist_*`` function so that it works without
    CUDA (see the module docstring, item 4)."""

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
    """Make mmengine's ``pytorch`` and ``slurm`` launchers and its DDP
    wrapper work on machines without CUDA (gloo). Idempotent.

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
    """Stands for ``torch.utils.checkpoint`` in an upstream module: every
    attribute is torch's, except that :meth:`checkpoint` names
    ``use_reentrant`` (False unless the caller passes it)."""

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

#: upstream module -> the name under which it imports torch.utils.checkpoint
#: (the backbones our components subclass, whose blocks take ``with_cp``)
CHECKPOINTING_UPSTREAM = {
    'mmpretrain.models.backbones.swin_transformer': 'cp',
    'mmdet.models.backbones.swin': 'cp',
    'mmseg.models.backbones.swin': 'cp',
    'mmseg.models.backbones.vit': 'cp',
    'mmaction.models.backbones.swin': 'checkpoint',
}


def explicit_checkpoint_reentrancy():
    """Bind :data:`EXPLICIT_CHECKPOINT` in the installed modules of
    :data:`CHECKPOINTING_UPSTREAM` (importing them; a toolbox that is not
    installed is skipped).

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
    """Apply every fix of this module; our tools call it first.

    ``import mmvitaccel`` never calls it. Set ``MMVITACCEL_NO_COMPAT=1`` to
    skip the fixes in our tools too (e.g. to reproduce an upstream bug).

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
