"""The one way a forward reads a value on the host (:func:`host_read`) and
copies host data to a device (:func:`device_constant`); docs/guarantees.md."""
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

#: every reason a forward may read a value on the host (docs/guarantees.md)
HOST_READS = {
    'kept_token_counts':
    'token pruning drops tokens: the largest and smallest kept count of '
    'the batch size the kept tokens and tell whether they need padding',
    'batch_mean_token_count':
    "batch_mode='mean': every image keeps the batch-mean count of tokens",
}

_recorders = []


def host_read(tensor, bound, reason):
    """``tensor.tolist()``, a data-dependent host read.

    Args:
        tensor (Tensor): the value, usually 0-d or a few entries.
        bound (int | float | list): returned on ``meta``: a static bound
            that keeps the shapes valid (e.g. every token kept).
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
    """Count the :func:`host_read` calls inside the block, by reason.

    Yields:
        collections.Counter: reason -> number of reads.
    """
    seen = Counter()
    _recorders.append(seen)
    try:
        yield seen
    finally:
        _recorders.remove(seen)


# --- host-to-device copies ---------------------------------------------------

#: most constants :func:`device_constant` keeps (least recently used goes)
MAX_DEVICE_CONSTANTS = 64
#: (key, device) -> (tensors, their version counters when built)
_constants = OrderedDict()
_lock = threading.Lock()
#: ``building``: depth of this thread in :func:`device_constant` builds
_local = threading.local()


def _graph_or_fake():
    """Whether tensors made now are recorded into a graph or fake (then no
    constant is kept or handed out); a measuring dispatch mode is not."""
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
    kept (read only; rebuilt if modified in place; not kept under capture).

    Args:
        key (tuple): hashable; every input of ``build`` but the device.
        build (callable): ``build(device) -> tuple[Tensor, ...]``.
        device (torch.device | str): where the tensors live.

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
    """Whether making ``data`` a tensor on ``device`` copies from the host."""
    if isinstance(data, torch.Tensor) and data.device.type != 'cpu':
        return False  # from a device: not from the host
    return _off_host(device)


def _host_data(part):
    """Whether an index or assigned value is host data: a list, an array or
    a CPU tensor of more than one entry."""
    if isinstance(part, torch.Tensor):
        return part.device.type == 'cpu' and part.dim() > 0
    return isinstance(part, list) or hasattr(part, '__array__')


#: factories that make a tensor from data (``torch.asarray``: >= 1.11)
_FACTORIES = tuple(f for f in (torch.tensor, torch.as_tensor,
                               getattr(torch, 'asarray', None)) if f)
#: methods that move a CPU tensor to their accelerator
_TO_DEVICE = tuple(getattr(torch.Tensor, n) for n in ('cuda', 'xpu', 'hpu',
                                                        'mtia')
                   if hasattr(torch.Tensor, n))


def _host_copy(func, args, kwargs):
    """The host-to-device copy ``func(*args, **kwargs)`` makes, or None."""
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
    """Records each host-to-device copy outside :func:`device_constant`."""

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
    :func:`device_constant`'s builds (``meta`` counts as a device).

    Yields:
        list[str]: each copy, in words.
    """
    seen = []
    with _HostCopyMode(seen):
        yield seen
