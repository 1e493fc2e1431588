"""The one way a forward reads a tensor's value on the host, and the one
way it copies host data to a device.

On an accelerator, reading a value (``.item()``, ``bool(t)``, ``int(t)``,
``.tolist()``) waits for every kernel queued before it (a device-to-host
synchronisation) and stops CUDA graphs. The forwards of this package make
their decisions from shapes, which the host knows, except where the data
decides by nature: how many tokens token pruning keeps. Those reads, and
only those, go through :func:`host_read`, each under a reason listed in
:data:`HOST_READS` (and in ``docs/guarantees.md``, "Host reads").

On the ``meta`` device there is no value to read: :func:`host_read` returns
the caller's static bound (e.g. "every token is kept"), so that a model's
shapes can be inferred on ``meta`` without data.

The other direction: a tensor made from Python data on a device
(``torch.tensor(rows, device=...)``, ``.to(device)`` of a CPU tensor) is a
host-to-device copy, which from pageable memory also blocks the host, on
every call. A forward that needs such a constant (index tables built from
shapes) gets it from :func:`device_constant`, which builds it once per key
and device and keeps it. :func:`recorded_host_copies` records every other
copy made inside a block (the tests run the forwards under it).

Plain torch: no registry, no OpenMMLab imports.
"""
import contextlib
import threading
from collections import Counter, OrderedDict

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _python_dispatch

from mmvitaccel.ops.tracing import is_capturing

__all__ = [
    'HOST_READS', 'host_read', 'recorded_host_reads', 'device_constant',
    'recorded_host_copies'
]

#: every reason a forward may read a tensor's value on the host: the kept
#: token counts of token pruning, which the data decides
#: (``docs/guarantees.md``, "Host reads", lists where and how often)
HOST_READS = {
    'kept_token_counts':
    'token pruning drops tokens: the largest and smallest kept count of '
    'the batch size the kept tokens and tell whether they need padding',
    'batch_mean_token_count':
    "batch_mode='mean': every image keeps the batch-mean count of tokens",
}

_recorders = []


def host_read(tensor, bound, reason):
    """``tensor.tolist()``: its value on the host, a data-dependent read.

    Args:
        tensor (Tensor): the value, usually 0-d or a few entries.
        bound (int | float | list): what to return on the ``meta`` device,
            where there is no value: a static bound that keeps the shapes
            valid (e.g. the number of tokens, "every token kept").
        reason (str): a key of :data:`HOST_READS`.

    Returns:
        int | float | bool | list: the value (``bound`` on ``meta``).

    Raises:
        ValueError: ``reason`` is not in :data:`HOST_READS`.
    """
    if reason not in HOST_READS:
        raise ValueError(f'host read for an unlisted reason {reason!r}; '
                         f'the listed ones are {sorted(HOST_READS)}')
    for seen in _recorders:
        seen[reason] += 1
    if tensor.device.type == 'meta':
        return bound
    return tensor.tolist()


@contextlib.contextmanager
def recorded_host_reads():
    """Count the :func:`host_read` calls made inside the block, by reason.

    Yields:
        collections.Counter: reason -> number of reads, filled as the
        block runs.
    """
    seen = Counter()
    _recorders.append(seen)
    try:
        yield seen
    finally:
        _recorders.remove(seen)


# --- host-to-device copies ---------------------------------------------------

#: the most constants :func:`device_constant` keeps, all keys and devices
#: together (the least recently used one goes first; the keys are few: one
#: per window and bin grid of a model, per device)
MAX_DEVICE_CONSTANTS = 64
#: (key, device) -> (tensors, their version counters when built)
_constants = OrderedDict()
_lock = threading.Lock()
#: ``building``: how deep this thread is inside a :func:`device_constant`
#: build (the copies there are the allowed ones)
_local = threading.local()


def _graph_or_fake():
    """Whether tensors made now belong to a graph being recorded (Dynamo,
    the TorchScript tracer, ``make_fx``) or are fake (``torch.export``'s
    fake tensors): then a constant is made afresh, never kept, and a kept
    one never handed out. A measuring dispatch mode (a FLOP counter) does
    not count."""
    if is_capturing() or torch.jit.is_tracing():
        return True
    keys = getattr(torch._C, '_TorchDispatchModeKey', None)
    if keys is not None:  # the infrastructure modes of torch >= 2.2
        return any(
            torch._C._get_dispatch_mode(getattr(keys, k)) is not None
            for k in ('FAKE', 'PROXY', 'FUNCTIONAL') if hasattr(keys, k))
    return _python_dispatch._get_current_dispatch_mode() is not None


def device_constant(key, build, device):
    """Tensors made from host data, built once per ``key`` and device and
    kept: the one way a forward copies host data to a device.

    The first call for a key and device builds (one host-to-device copy per
    tensor); later ones return the same tensors, with no copy and no
    synchronisation. They are shared by every caller: **do not modify
    them** (a caller that needs to, clones). Should one be modified in
    place anyway, its version counter tells, and the next call builds
    afresh. They are built outside inference mode, so that a first call
    under ``torch.inference_mode`` does not keep inference tensors that
    autograd would refuse later. While a graph is recorded or tensors are
    fake (``torch.compile``, ``torch.export``, the TorchScript tracer,
    ``make_fx``) nothing is kept nor handed out: ``build`` runs and its
    tensors are constants of the graph.

    Args:
        key (tuple): hashable; every input of ``build`` but the device
            (e.g. ``('stvit.bin_indices', window, out)``).
        build (callable): ``build(device) -> tuple[Tensor, ...]``, made from
            host data on ``device``.
        device (torch.device | str): where the tensors live (``'cuda'``
            without an index: the current one).

    Returns:
        tuple[Tensor, ...]: what ``build`` returned (kept: read only).
    """
    device = torch.device(device)
    if _graph_or_fake():
        return tuple(build(device))
    if device.index is None and device.type not in ('cpu', 'meta'):
        device = torch.empty(0, device=device).device  # the current one
    full_key = (key, device)
    with _lock:
        entry = _constants.get(full_key)
        if entry is not None and \
                tuple(t._version for t in entry[0]) == entry[1]:
            _constants.move_to_end(full_key)
            return entry[0]
    _local.building = getattr(_local, 'building', 0) + 1
    try:
        with torch.inference_mode(False):
            tensors = tuple(build(device))
    finally:
        _local.building -= 1
    with _lock:
        _constants[full_key] = (tensors, tuple(t._version for t in tensors))
        _constants.move_to_end(full_key)
        while len(_constants) > MAX_DEVICE_CONSTANTS:
            _constants.popitem(last=False)
    return tensors


def _default_device():
    get = getattr(torch, 'get_default_device', None)  # torch >= 2.3
    return torch.device(get() if get is not None else 'cpu')


def _off_host(device):
    return device is not None and torch.device(device).type != 'cpu'


def _from_host(data, device):
    """Whether making ``data`` (Python data, or a tensor) a tensor on
    ``device`` copies from the host to another device."""
    if isinstance(data, torch.Tensor) and data.device.type != 'cpu':
        return False  # from a device: not from the host
    return _off_host(device)


def _host_data(part):
    """Whether an index or a value to assign is host data that becomes a
    tensor on the device: a list, an array, or a CPU tensor of more than
    one entry (a 0-d one is read as a number)."""
    if isinstance(part, torch.Tensor):
        return part.device.type == 'cpu' and part.dim() > 0
    return isinstance(part, list) or hasattr(part, '__array__')


#: the factories that make a tensor from data (``torch.asarray``: >= 1.11)
_FACTORIES = tuple(f for f in (torch.tensor, torch.as_tensor,
                               getattr(torch, 'asarray', None)) if f)
#: the methods that move a CPU tensor to an accelerator of their name
_TO_DEVICE = tuple(getattr(torch.Tensor, n) for n in ('cuda', 'xpu', 'hpu',
                                                        'mtia')
                   if hasattr(torch.Tensor, n))


def _host_copy(func, args, kwargs):
    """What host-to-device copy ``func(*args, **kwargs)`` makes, in words,
    or None."""
    name = getattr(func, '__name__', str(func))
    if func in _FACTORIES:
        data = args[0] if args else kwargs.get('data', kwargs.get('obj'))
        device = kwargs.get('device')
        if device is None:
            if isinstance(data, torch.Tensor) and func is not torch.tensor:
                return None  # stays where it is
            device = _default_device()
        if _from_host(data, device):
            return f'torch.{name}({type(data).__name__}) to {device}'
        return None
    self = args[0] if args else None
    if not isinstance(self, torch.Tensor):
        return None
    on_host = self.device.type == 'cpu'
    if func is torch.Tensor.new_tensor:
        data = args[1] if len(args) > 1 else kwargs.get('data')
        device = kwargs.get('device') or self.device
        if _from_host(data, device):
            return f'Tensor.new_tensor({type(data).__name__}) to {device}'
    elif func is torch.Tensor.to and on_host:
        device = torch._C._nn._parse_to(*args[1:], **kwargs)[0]
        if _off_host(device):
            return f'a CPU tensor {tuple(self.shape)}.to({device})'
    elif func in _TO_DEVICE and on_host:
        return f'a CPU tensor {tuple(self.shape)}.{name}()'
    elif func is torch.Tensor.copy_ and not on_host:
        src = args[1] if len(args) > 1 else kwargs.get('src')
        if isinstance(src, torch.Tensor) and src.device.type == 'cpu':
            return f'copy_ of a CPU tensor {tuple(src.shape)} to {self.device}'
    elif name in ('__getitem__', '__setitem__') and not on_host:
        # by name: torch < 2.2 hands on torch._C._TensorBase's methods
        index = args[1] if len(args) > 1 else None
        parts = index if isinstance(index, tuple) else (index, )
        if any(_host_data(p) for p in parts + tuple(args[2:3])):
            return f'{name} with host data on {self.device}'
    return None


class _HostCopyMode(TorchFunctionMode):
    """Appends to ``seen`` each host-to-device copy a torch function makes
    outside :func:`device_constant` builds."""

    def __init__(self, seen):
        super().__init__()
        self.seen = seen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not getattr(_local, 'building', 0):
            what = _host_copy(func, args, kwargs)
            if what is not None:
                self.seen.append(what)
        return func(*args, **kwargs)


@contextlib.contextmanager
def recorded_host_copies():
    """Record the host-to-device copies made inside the block, but those of
    :func:`device_constant`'s builds.

    Seen: ``torch.tensor``/``torch.as_tensor``/``torch.asarray`` of Python
    data or a CPU tensor onto another device (the default device when none
    is given), ``Tensor.new_tensor`` onto one, ``.to(device)``/``.cuda()``
    of a CPU tensor, ``copy_`` of a CPU tensor into one, and indexing or
    assigning into a device tensor with a list, an array or a CPU tensor.
    ``meta`` counts as a device (the tests run the forwards there). Not
    seen: copies made below torch's Python functions (C++ code).

    Yields:
        list[str]: each copy, in words, appended as the block runs.
    """
    seen = []
    with _HostCopyMode(seen):
        yield seen
