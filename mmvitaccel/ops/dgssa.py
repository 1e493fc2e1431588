"""DGSSA: dynamic-guided static self-attention (plain torch).

Paper: *Accelerating Vision Transformers Based on Heterogeneous Attention
Patterns* (no public code). The early layers of a ViT attend in nearly the
same way for every image, so their ``softmax(Q K^T)`` is replaced by a
learned **static** per-head matrix shared by all images:

    out = Proj(A_static . V)                      (DGSSA, FLOPs m^2 d + 2 m d^2)

Reconstruction adopted (``docs/dgssa_glad_design.md#dgssa``): the module
keeps static *logits*
``S`` ``(h, N, N)`` and computes ``A_static = softmax(S + mask)``, so that
Swin's shift masks and padding masks still apply; ``S`` is initialised as
``log(mean attention)`` of the replaced dynamic layer over training images
("dynamic-guided", ``'dg'``), or by the paper's ablation inits
(``'random'``, ``'uniform'``, ``'local'``).

This module also holds the attention statistics that guide the design:
the per-layer **difference metric** (how much attention varies across
images) and the **expected singular values** of attention that the
accuracy metric (AM) of the GLAD search uses; see :mod:`.glad` for GLAD and
the search.

Plain torch: no registry, no OpenMMLab imports.
"""
import math

import torch

from mmvitaccel.ops.attention import MASKED_LOGIT, masked_softmax
from mmvitaccel.ops.checks import check_choice

#: the static-attention initialisations of the paper's ablation
INIT_MODES = ('dg', 'random', 'uniform', 'local')

#: smallest probability turned into a logit (``log(0)`` is ``-inf``)
LOG_EPS = 1e-6

#: the masked-logit offset under DGSSA's older name (one value for every
#: method: :data:`mmvitaccel.ops.attention.MASKED_LOGIT`)
MASK_VALUE = MASKED_LOGIT


def check_init_mode(mode):
    """Raise a clear ``ValueError`` for an unknown static-attention init
    (:func:`~mmvitaccel.ops.checks.check_choice` with the name ``'static
    attention init'``).

    Args:
        mode (str): one of :data:`INIT_MODES`.

    Raises:
        ValueError: ``mode`` is not in :data:`INIT_MODES`.
    """
    check_choice('static attention init', mode, INIT_MODES)


def static_attention(logits, v, mask=None):
    """``softmax(S + mask) . V`` with static per-head logits ``S``.

    The softmax of ``S`` does not depend on the image, so without a mask it
    is computed once per call and shared by the whole batch.

    Args:
        logits (Tensor): static logits ``S`` ``(h, N, N)``.
        v (Tensor): values ``(B, h, N, d_h)``; with a mask of ``nW``
            windows, ``B`` must be a multiple of ``nW`` (windows of one
            image consecutive, as ``window_partition`` orders them).
        mask (Tensor, optional): additive float mask ``(nW, N, N)`` (0 where
            allowed, a large negative number where not: Swin's shift mask)
            or bool mask ``(nW, N, N)`` (True where allowed; forbidden keys
            get :data:`~mmvitaccel.ops.attention.MASKED_LOGIT`).

    Returns:
        Tensor: ``(B, h, N, d_h)``.
    """
    if mask is None:
        # einsum: one batched product per head (batch folded into columns),
        # counted exactly by count_flops
        return torch.einsum('hnm,bhmd->bhnd',
                            logits.softmax(dim=-1).to(v.dtype), v)
    nW = mask.shape[0]
    B, h, N, d = v.shape
    if B % nW:
        raise ValueError(f'{B} windows are not a multiple of the mask\'s '
                         f'{nW} windows')
    attn = masked_softmax(logits[None], mask[:, None])  # (nW, h, N, N)
    out = torch.einsum('whnm,bwhmd->bwhnd', attn.to(v.dtype),
                       v.view(B // nW, nW, h, N, d))
    return out.reshape(B, h, N, d)


def local_logits(num_heads, grid, extra_tokens=0, strength=1.0):
    """Position-aware static logits (the paper's ``'local'`` init).

    As ConViT's positional self-attention, head ``k`` attends around the
    offset ``delta_k`` of a ``s x s`` neighbourhood, ``s = ceil(sqrt(h))``
    (a convolution with an ``s x s`` kernel):
    ``S_k[i, j] = -strength * ||(p_j - p_i) - delta_k||^2``. Rows of extra
    (class) tokens are uniform (0); in patch rows their columns get the
    row's smallest logit.

    Args:
        num_heads (int): ``h``.
        grid (tuple[int, int]): patch grid ``(H, W)``, raster order.
        extra_tokens (int): class tokens before the patches.
        strength (float): sharpness of the locality.

    Returns:
        Tensor: ``(h, N, N)``, ``N = extra_tokens + H * W``.
    """
    H, W = grid
    s = math.ceil(math.sqrt(num_heads))
    ys, xs = torch.meshgrid(torch.arange(H), torch.arange(W), indexing='ij')
    pos = torch.stack([ys.flatten(), xs.flatten()], -1).float()  # (HW, 2)
    rel = pos[None, :, :] - pos[:, None, :]  # (HW, HW, 2): p_j - p_i
    n = extra_tokens + H * W
    out = torch.zeros(num_heads, n, n)
    for k in range(num_heads):
        delta = torch.tensor([k // s - (s - 1) / 2, k % s - (s - 1) / 2])
        patch = -strength * ((rel - delta)**2).sum(-1)
        out[k, extra_tokens:, extra_tokens:] = patch
        if extra_tokens:
            out[k, extra_tokens:, :extra_tokens] = patch.amin(
                -1, keepdim=True)
    return out


def init_static_logits(mode, num_heads, num_tokens, grid=None,
                       extra_tokens=0, mean_attention=None, std=.02):
    """Static logits for one layer by one of :data:`INIT_MODES`.

    * ``'dg'``: ``log(mean attention)`` of the replaced dynamic layer
      (dynamic-guided); ``softmax`` of it gives the mean attention back
      (rows are normalised again, probabilities below ``LOG_EPS`` clamped);
    * ``'random'``: truncated normal, ``std``;
    * ``'uniform'``: zeros, i.e. uniform attention;
    * ``'local'``: :func:`local_logits`.

    Args:
        mode (str): the init.
        num_heads (int): ``h``.
        num_tokens (int): ``N``.
        grid (tuple[int, int], optional): patch grid, for ``'local'``.
        extra_tokens (int): class tokens before the patches (``'local'``).
        mean_attention (Tensor, optional): ``(h, N, N)``, for ``'dg'``.
        std (float): std of ``'random'``.

    Returns:
        Tensor: ``(h, N, N)`` float32.
    """
    check_init_mode(mode)
    shape = (num_heads, num_tokens, num_tokens)
    if mode == 'dg':
        if mean_attention is None:
            raise ValueError("init 'dg' needs the mean attention of the "
                             'replaced layer (tools/dgssa_init.py writes it)')
        if tuple(mean_attention.shape) != shape:
            raise ValueError(f'mean attention of shape '
                             f'{tuple(mean_attention.shape)}, expected '
                             f'{shape}')
        return attention_to_logits(mean_attention)
    if mode == 'random':
        return torch.nn.init.trunc_normal_(torch.empty(shape), std=std,
                                           a=-2 * std, b=2 * std)
    if mode == 'uniform':
        return torch.zeros(shape)
    if grid is None or grid[0] * grid[1] + extra_tokens != num_tokens:
        raise ValueError(f"init 'local' needs the patch grid of the "
                         f'{num_tokens} tokens ({extra_tokens} extra), got '
                         f'{grid}')
    return local_logits(num_heads, grid, extra_tokens)


def resize_static_logits(logits, extra_tokens, grid):
    """Static logits of a square patch grid, resized to ``grid``.

    The patch-to-patch block ``(h, H0 W0, H0 W0)`` is a function of the
    query's and the key's positions; it is resized bicubically over the
    key's grid, then over the query's (as a relative position table is on
    a size change). The rows of the extra (class) tokens are resized over
    their key grid, their columns over the query grid; their corner is
    kept. Logits, not probabilities, are resized: the softmax renormalises.

    Args:
        logits (Tensor): ``(h, e + H0 W0, e + H0 W0)``, ``H0 = W0``.
        extra_tokens (int): ``e``, the class (and distillation) tokens first.
        grid (tuple[int, int]): ``(H1, W1)``, the new patch grid.

    Returns:
        Tensor: ``(h, e + H1 W1, e + H1 W1)``.

    Raises:
        ValueError: the checkpoint's patch tokens are not a square grid.
    """
    h, n, _ = logits.shape
    e = extra_tokens
    side = math.isqrt(n - e)
    if side * side != n - e:
        raise ValueError(f'static logits of {n - e} patch tokens are no '
                         f'square grid: cannot resize them to {tuple(grid)}')
    if (side, side) == tuple(grid):
        return logits
    H1, W1 = grid

    def over_keys(x):  # (h, q, side^2) -> (h, q, H1 W1)
        q = x.shape[1]
        x = x.reshape(h * q, 1, side, side).float()
        x = torch.nn.functional.interpolate(
            x, size=(H1, W1), mode='bicubic', align_corners=False)
        return x.reshape(h, q, H1 * W1).to(logits.dtype)

    patches = over_keys(logits[:, e:, e:])  # (h, side^2, H1 W1)
    patches = over_keys(patches.transpose(1, 2)).transpose(1, 2)
    out = logits.new_empty(h, e + H1 * W1, e + H1 * W1)
    out[:, e:, e:] = patches
    out[:, :e, :e] = logits[:, :e, :e]
    out[:, :e, e:] = over_keys(logits[:, :e, e:])
    out[:, e:, :e] = over_keys(logits[:, e:, :e].transpose(1, 2)).transpose(
        1, 2)
    return out


def attention_to_logits(attention, eps=LOG_EPS):
    """``log`` of an attention matrix, rows renormalised after clamping, so
    that ``softmax(attention_to_logits(A)) == A`` up to ``eps``.

    Args:
        attention (Tensor): ``(..., N, N)``, rows summing to 1.
        eps (float): floor of the probabilities.

    Returns:
        Tensor: logits of the same shape, float32.
    """
    a = attention.float().clamp_min(eps)
    return (a / a.sum(-1, keepdim=True)).log()


class AttentionStats:
    """Running statistics of one layer's attention over images.

    Accumulates, per head, the sum of the attention matrices (for the mean
    and the ``'dg'`` init), the sum of their squared Frobenius norms (for
    the difference metric) and the sum of their singular values sorted in
    descending order (for the expected singular values of the AM).

    A sample is one attention matrix ``(h, N, N)``: one image for a global
    attention, one window of one image for Swin (all windows share one
    static matrix, so they are samples of the same distribution).

    Args:
        singular_values (bool): also accumulate singular values (an SVD per
            sample and head; off when only the init is wanted).
    """

    def __init__(self, singular_values=False):
        self.singular_values = singular_values
        self.count = 0
        self.sum = None
        self.sq_norm = None
        self.sv_sum = None

    @torch.no_grad()
    def update(self, attn):
        """Add samples.

        Args:
            attn (Tensor): ``(S, h, N, N)`` attention of ``S`` samples.
        """
        attn = attn.detach().double()
        if self.sum is None:
            self.sum = torch.zeros(attn.shape[1:], dtype=torch.float64)
            self.sq_norm = torch.zeros(attn.shape[1], dtype=torch.float64)
            if self.singular_values:
                self.sv_sum = torch.zeros(attn.shape[1:-1],
                                          dtype=torch.float64)
        self.sum += attn.sum(0).cpu()
        self.sq_norm += attn.pow(2).sum((-1, -2)).sum(0).cpu()
        if self.singular_values:
            self.sv_sum += torch.linalg.svdvals(attn).sum(0).cpu()
        self.count += attn.shape[0]

    def _check(self):
        if not self.count:
            raise ValueError('no attention recorded')

    @property
    def mean(self):
        """Tensor: mean attention ``(h, N, N)`` float32."""
        self._check()
        return (self.sum / self.count).float()

    @property
    def difference(self):
        """Tensor: the difference metric per head ``(h, )``:
        ``sqrt(E ||A - mean||^2) / ||mean||`` (Frobenius norms).

        The paper plots, per layer, how far each image's attention lies from
        the mean attention; we use the root-mean-square relative distance,
        which one pass over the data gives
        (``E||A - mean||^2 = E||A||^2 - ||mean||^2``).
        """
        self._check()
        mean = self.sum / self.count
        mean_sq = mean.pow(2).sum((-1, -2))
        var = (self.sq_norm / self.count - mean_sq).clamp_min(0)
        return (var.sqrt() / mean_sq.sqrt()).float()

    @property
    def expected_singular_values(self):
        """Tensor: ``E[sigma_i]`` ``(N, )``, descending, averaged over
        samples and heads."""
        self._check()
        if self.sv_sum is None:
            raise ValueError('singular values were not recorded')
        return (self.sv_sum / self.count).mean(0).float()
