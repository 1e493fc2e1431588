"""STViT token operators: initial cluster centres by spatial pooling.

Paper: Chang et al., *Making Vision Transformers Efficient from A Token
Sparsification View* (CVPR 2023); design notes in ``docs/stvit_design.md``.

STGM layer 1 starts from initial cluster centres ``P``: each window of image
tokens (a 7x7 Swin window, or the whole map for DeiT) is pooled to
``w_s x w_s`` tokens. The bins are those of
:func:`torch.nn.functional.adaptive_max_pool2d` (7 -> 3 gives the
overlapping rows 0-2, 2-4, 4-6), so that the authors' pooling is reproduced
exactly on unpadded windows. Padded tokens never enter a centre; a centre
whose bin lies entirely in the padding is zero and marked invalid. The
bins' index tables are made from Python lists once per window, bins and
device and kept (:func:`~.host_sync.device_constant`): a forward makes no
host-to-device copy for them after the first.

Plain torch: no registry, no OpenMMLab imports.
"""
import torch
import torch.nn as nn

from mmvitaccel.ops.attention import masked_softmax
from mmvitaccel.ops.checks import check_choice
from mmvitaccel.ops.host_sync import device_constant

POOLING_MODES = ('max', 'avg')

#: every way to get initial centres: the fixed modes and the learnable one
CENTRE_POOLINGS = POOLING_MODES + ('intra_inter', )


def check_pooling(pooling):
    """Raise a clear ``ValueError`` for an unknown centre pooling
    (:func:`~mmvitaccel.ops.checks.check_choice` with the name
    ``'pooling'``).

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
        list[tuple[int, int]]: ``[start, end)`` of each bin, with
        ``start = floor(i * in / out)`` and ``end = ceil((i + 1) * in / out)``.
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
        Tensor: ``(h_s * w_s, n_b)`` long indices into the ``h * w`` raster
        tokens of the window, ``n_b`` the largest bin size, and a bool
        tensor of the same shape that is False where a smaller bin is padded
        to ``n_b`` (padded slots repeat the bin's first token). Copies of
        the kept tables (:func:`_bin_tables`): the caller may modify them.
    """
    index, present = _bin_tables(window, out, device)
    return index.clone(), present.clone()


def _bin_tables(window, out, device=None):
    """:func:`bin_indices`, built from Python lists once per window, bins
    and device and kept (:func:`~.host_sync.device_constant`): a forward
    makes no host-to-device copy for them after the first. Read only.

    Args:
        window (tuple[int, int]): window ``(h, w)``.
        out (tuple[int, int]): bins ``(h_s, w_s)``.
        device (torch.device, optional): default: the CPU.

    Returns:
        tuple[Tensor, Tensor]: ``(h_s * w_s, n_b)`` long indices and bool
        presence, shared by every caller (do not modify).
    """
    window = tuple(int(n) for n in window)
    out = tuple(int(n) for n in out)
    def build(on):  # a closure: torch < 2.2's Dynamo cannot trace partial
        return _build_bin_indices(window, out, on)

    return device_constant(('stvit.bin_indices', window, out), build,
                           device or 'cpu')


def _build_bin_indices(window, out, device):
    """The tables of :func:`bin_indices`, made from Python lists on
    ``device`` (a host-to-device copy on an accelerator).

    Args:
        window (tuple[int, int]): window ``(h, w)``.
        out (tuple[int, int]): bins ``(h_s, w_s)``.
        device (torch.device): device of the result.

    Returns:
        tuple[Tensor, Tensor]: ``(h_s * w_s, n_b)`` long indices and bool
        presence.
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
    """Gather bin members: ``(N, S, n_b, C)`` tokens and ``(N|nW, S, n_b)``
    membership (bin slot used and token valid)."""
    # the kept tables: read only (indexing and ``&`` make new tensors)
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
    """Initial cluster centres ``P`` by non-parametric adaptive pooling.

    ``P_s = max_{t in bin s, t valid} X_t`` (``mode='max'``, the authors'
    choice) or the mean over the same tokens (``mode='avg'``).

    Args:
        windows (Tensor): ``(N, h * w, C)`` image tokens per window, raster
            order (``N = B * nW``).
        window (tuple[int, int]): window ``(h, w)``.
        out (tuple[int, int]): ``(h_s, w_s)`` centres per window.
        mode (str): ``'max'`` or ``'avg'``.
        valid (Tensor, optional): ``(nW, h * w)`` or ``(N, h * w)`` bool,
            False on padding.

    Returns:
        tuple[Tensor, Tensor]: centres ``(N, h_s * w_s, C)`` (zero where the
        bin has no valid token) and their validity ``(N, h_s * w_s)``.
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
    """Learnable intra- and inter-window spatial pooling of STViT.

    The paper splits the map into ``w_s x w_s`` pooling windows (here the
    adaptive bins of a Swin window, or of the whole DeiT patch grid), one
    centre each, and states what the two functions map ("``f_intra`` ...
    projects the input window from H/w_s x W/w_s x C to H/w_s x W/w_s";
    ``f_inter`` maps "w_s x w_s x C to w_s x w_s x HW/w_s^2", computing
    "the inter-window relations" to "generate the offset"), but its
    equations were lost in our copy. The reconstruction
    (``docs/stvit_design.md``, section 5):

    * intra-window mask ``M = f_intra(X)``, ``f_intra = Linear(C, 1)``
      without bias (a bias adds one constant to every logit of a bin, which
      the softmax over the bin ignores: its gradient would be exactly zero);
    * integrated tokens ``P^_s = softmax(M_s) . X_s`` over the tokens of
      bin ``s``;
    * inter-window offset ``O = f_inter(P^)``: each integrated token is
      projected to one offset per bin member, ``Z_s = W P^_s + b``
      (``Linear(C, n_b)``), and the offsets of the ``w_s x w_s`` grid are
      mixed across its positions, ``O_s = sum_t A_st Z_t`` with a learnable
      ``A`` (``(w_s^2, w_s^2)``, ``inter_mix``), so that the offset of one
      window depends on every other window's integrated token: the
      relation the paper's "maximizing the distance among initial cluster
      centers in different windows" needs, which a per-token layer cannot
      express. Empty bins (all padding) contribute nothing;
    * centres ``P_s = softmax(M_s + O_s) . X_s``.

    A full mixing over the grid is chosen over a depthwise convolution on
    it: the grid is only 3x3 (Swin) to 7x7 (DeiT, 49 tokens), so a 3x3
    kernel would already reach nearly every window, while ``A`` sees all
    of them and keeps the positions apart, at ``w_s^4`` parameters (81 for
    Swin, 256 for 16 DeiT tokens). With ``f_intra`` and ``Linear(C, n_b)``
    DeiT-T gets 3,536 new parameters, 0.06% (the paper: about 0.05%).

    ``f_intra`` and ``Linear(C, n_b)`` are zero-initialised and ``A`` is the
    identity, so the module starts as average pooling (a pretrained
    backbone is not disturbed) and every parameter gets a gradient once
    the projection has moved from zero.

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
        """Zero ``f_intra`` and the projection of ``f_inter``, identity
        mixing: the pooling starts as average pooling."""
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
    """``softmax(logits) . members`` per bin over the members in ``keep``
    (:func:`~.attention.masked_softmax`); empty bins give zeros.

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
