"""STViT's initial cluster centres by pooling over ``adaptive_max_pool2d``'s
bins, padding left out (``docs/stvit_design.md`` sections 2.1 and 5)."""
import torch
import torch.nn as nn

from mmvitaccel.ops.attention import masked_softmax
from mmvitaccel.ops.checks import check_choice
from mmvitaccel.ops.host_sync import device_constant

POOLING_MODES = ('max', 'avg')

#: every way to get initial centres: the fixed modes and the learnable one
CENTRE_POOLINGS = POOLING_MODES + ('intra_inter', )


def check_pooling(pooling):
    """Raise ``ValueError`` for an unknown centre pooling.

    Args:
        pooling (str): one of :data:`CENTRE_POOLINGS`.

    Raises:
        ValueError: ``pooling`` is not in :data:`CENTRE_POOLINGS`.
    """
    check_choice('pooling', pooling, CENTRE_POOLINGS)


def adaptive_bins(in_size, out_size):
    """The bins of adaptive pooling along one axis.

    Args:
        in_size (int): input length.
        out_size (int): number of bins, ``<= in_size``.

    Returns:
        list[tuple[int, int]]: ``[start, end)`` per bin,
        ``[floor(i in / out), ceil((i + 1) in / out))``.
    """
    if not 1 <= out_size <= in_size:
        raise ValueError(f'cannot pool {in_size} tokens into {out_size} bins')
    return [((i * in_size) // out_size, -(-(i + 1) * in_size // out_size))
            for i in range(out_size)]


def bin_indices(window, out, device=None):
    """Token indices of each 2-D adaptive bin of a window.

    Args:
        window (tuple[int, int]): window ``(h, w)``.
        out (tuple[int, int]): bins ``(h_s, w_s)``.
        device (torch.device, optional): device of the result.

    Returns:
        Tensor: ``(h_s * w_s, n_b)`` long raster indices (``n_b`` the
        largest bin; padded slots repeat the first token) and a bool
        tensor, False on padded slots. Copies: the caller may modify them.
    """
    index, present = _bin_tables(window, out, device)
    return index.clone(), present.clone()


def _bin_tables(window, out, device=None):
    """:func:`bin_indices`, kept per window, bins and device; read only.

    Args:
        window (tuple[int, int]): window ``(h, w)``.
        out (tuple[int, int]): bins ``(h_s, w_s)``.
        device (torch.device, optional): default: the CPU.

    Returns:
        tuple[Tensor, Tensor]: ``(h_s * w_s, n_b)`` indices and presence.
    """
    window = tuple(int(n) for n in window)
    out = tuple(int(n) for n in out)
    def build(on):  # a closure: torch < 2.2's Dynamo cannot trace partial
        return _build_bin_indices(window, out, on)

    return device_constant(('stvit.bin_indices', window, out), build,
                           device or 'cpu')


def _build_bin_indices(window, out, device):
    """The tables of :func:`bin_indices`, built from Python lists.

    Args:
        window (tuple[int, int]): window ``(h, w)``.
        out (tuple[int, int]): bins ``(h_s, w_s)``.
        device (torch.device): device of the result.

    Returns:
        tuple[Tensor, Tensor]: ``(h_s * w_s, n_b)`` indices and presence.
    """
    h, w = window
    bins = []
    for r0, r1 in adaptive_bins(h, out[0]):
        for c0, c1 in adaptive_bins(w, out[1]):
            bins.append([r * w + c for r in range(r0, r1)
                         for c in range(c0, c1)])
    n_b = max(len(b) for b in bins)
    index = torch.tensor([b + [b[0]] * (n_b - len(b)) for b in bins],
                         device=device)
    present = torch.tensor([[True] * len(b) + [False] * (n_b - len(b))
                            for b in bins],
                           device=device)
    return index, present


def _bin_members(windows, window, out, valid):
    """Bin members ``(N, S, n_b, C)`` and their membership ``(N, S, n_b)``."""
    index, present = _bin_tables(window, out, windows.device)
    members = windows[:, index]  # (N, S, n_b, C)
    keep = present[None]
    if valid is not None:
        if valid.shape[-1] != windows.shape[1]:
            raise ValueError(f'mask of {valid.shape[-1]} tokens for windows '
                             f'of {windows.shape[1]}')
        keep = keep & valid[:, index]  # (nW, S, n_b)
    return members, _per_window(keep, windows.shape[0])


def _per_window(mask, n):
    """Repeat a per-window mask ``(nW, ...)`` over the batch: ``(n, ...)``."""
    if mask.shape[0] == n:
        return mask
    if n % mask.shape[0]:
        raise ValueError(f'{n} windows is not a multiple of the mask\'s '
                         f'{mask.shape[0]}')
    return mask.repeat(n // mask.shape[0], *[1] * (mask.dim() - 1))


def pool_centres(windows, window, out, mode='max', valid=None):
    """Initial centres ``P`` by adaptive pooling: ``P_s = max_{t in bin s,
    t valid} X_t`` (``'max'``, the authors') or the mean (``'avg'``).

    Args:
        windows (Tensor): ``(N, h * w, C)`` tokens per window, raster order.
        window (tuple[int, int]): window ``(h, w)``.
        out (tuple[int, int]): ``(h_s, w_s)`` centres per window.
        mode (str): ``'max'`` or ``'avg'``.
        valid (Tensor, optional): ``(nW, h * w)`` or ``(N, h * w)`` bool,
            False on padding.

    Returns:
        tuple[Tensor, Tensor]: centres ``(N, h_s * w_s, C)`` (zero for an
        empty bin) and their validity ``(N, h_s * w_s)``.
    """
    check_choice('pooling mode', mode, POOLING_MODES)
    members, keep = _bin_members(windows, window, out, valid)
    centre_valid = keep.any(-1)
    if mode == 'max':
        centres = members.masked_fill(~keep[..., None],
                                      float('-inf')).amax(2)
        centres = centres.masked_fill(~centre_valid[..., None], 0.)
    else:
        weight = keep.to(windows.dtype)
        weight = weight / weight.sum(-1, keepdim=True).clamp(min=1)
        centres = (weight[..., None] * members).sum(2)
    return centres, centre_valid


class IntraInterPooling(nn.Module):
    """STViT's learnable intra- and inter-window pooling, reconstructed
    (``docs/stvit_design.md`` section 5).

    ``M = f_intra(X)`` (``Linear(C, 1)``, no bias), ``P^_s = softmax(M_s)
    X_s``, ``Z_t = W P^_t + b`` (``Linear(C, n_b)``), ``O_s = sum_t A_st
    Z_t`` (``inter_mix``), ``P_s = softmax(M_s + O_s) X_s``. Starts as
    average pooling.

    Args:
        embed_dims (int): channels ``C``.
        window (tuple[int, int]): window ``(h, w)`` the bins are cut from.
        out (tuple[int, int]): ``(h_s, w_s)`` centres per window.
    """

    def __init__(self, embed_dims, window, out):
        super().__init__()
        self.window = tuple(window)
        self.out = tuple(out)
        index, _ = _bin_tables(self.window, self.out)
        self.bin_size = index.shape[1]
        num_bins = self.out[0] * self.out[1]
        self.intra = nn.Linear(embed_dims, 1, bias=False)
        self.inter = nn.Linear(embed_dims, self.bin_size)
        self.inter_mix = nn.Parameter(torch.empty(num_bins, num_bins))
        self.reset_parameters()

    def reset_parameters(self):
        """Zero ``f_intra`` and ``W, b``; ``A`` the identity."""
        nn.init.zeros_(self.intra.weight)
        nn.init.zeros_(self.inter.weight)
        nn.init.zeros_(self.inter.bias)
        with torch.no_grad():
            self.inter_mix.copy_(torch.eye(self.inter_mix.shape[0]))

    def forward(self, windows, valid=None):
        """Pool windows into centres.

        Args:
            windows (Tensor): ``(N, h * w, C)`` image tokens per window.
            valid (Tensor, optional): ``(nW, h * w)`` or ``(N, h * w)`` bool.

        Returns:
            tuple[Tensor, Tensor]: centres ``(N, h_s * w_s, C)`` and their
            validity ``(N, h_s * w_s)``.
        """
        members, keep = _bin_members(windows, self.window, self.out, valid)
        centre_valid = keep.any(-1)
        # M = f_intra(X): one logit per token of each bin, (N, S, n_b)
        logits = self.intra(members)[..., 0]
        # P^_s = softmax(M_s) . X_s
        integrated = _masked_softmax_pool(logits, members, keep,
                                          centre_valid)
        # O = f_inter(P^): Z_t = W P^_t + b, O_s = sum_t A_st Z_t
        projected = self.inter(integrated).masked_fill(
            ~centre_valid[..., None], 0.)  # (N, S, n_b)
        offsets = torch.einsum('st,ntb->nsb', self.inter_mix, projected)
        # P_s = softmax(M_s + O_s) . X_s
        centres = _masked_softmax_pool(logits + offsets, members, keep,
                                       centre_valid)
        return centres, centre_valid

    def extra_repr(self):
        return f'window={self.window}, out={self.out}'


def _masked_softmax_pool(logits, members, keep, centre_valid):
    """``softmax(logits) . members`` per bin over ``keep``; empty bins 0.

    Args:
        logits (Tensor): ``(N, S, n_b)``.
        members (Tensor): ``(N, S, n_b, C)``.
        keep (Tensor): ``(N, S, n_b)`` bool, the members that count.
        centre_valid (Tensor): ``(N, S)`` bool, bins with a member.

    Returns:
        Tensor: ``(N, S, C)``.
    """
    weight = masked_softmax(logits, keep)
    pooled = (weight[..., None] * members).sum(2)
    return pooled.masked_fill(~centre_valid[..., None], 0.)
