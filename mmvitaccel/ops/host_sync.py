"""The one way a forward reads a tensor's value on the host.

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

Plain torch: no registry, no OpenMMLab imports.
"""
import contextlib
from collections import Counter

__all__ = ['HOST_READS', 'host_read', 'recorded_host_reads']

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
