"""DGSSA: ``out = Proj(softmax(S + mask) V)``, static logits ``S`` ``(h, N,
N)``; inits and attention statistics (``docs/dgssa_glad_design.md``)."""
import math

import torch

from mmvitaccel.ops.attention import MASKED_LOGIT, masked_softmax
from mmvitaccel.ops.checks import check_choice

#: the static-attention initialisations of the paper's ablation
INIT_MODES = ('dg', 'random', 'uniform', 'local')

#: smallest probability turned into a logit (``log(0)`` is ``-inf``)
LOG_EPS = 1e-6

#: DGSSA's older name of :data:`~mmvitaccel.ops.attention.MASKED_LOGIT`
MASK_VALUE = MASKED_LOGIT


def check_init_mode(mode):
    """Raise ``ValueError`` for an unknown static-attention init.

    Args:
        mode (str): one of :data:`INIT_MODES`.

    Raises:
        ValueError: ``mode`` is not in :data:`INIT_MODES`.
    """
    check_choice('static attention init', mode, INIT_MODES)


def static_attention(logits, v, mask=None):
    """``softmax(S + mask) . V``; without a mask the softmax is shared by
    the batch.

    Args:
        logits (Tensor): static logits ``S`` ``(h, N, N)``.
        v (Tensor): values ``(B, h, N, d_h)``; with a mask, ``B`` a multiple
            of ``nW`` (one image's windows consecutive).
        mask (Tensor, optional): ``(nW, N, N)``, additive (Swin's shift
            mask) or bool (True where allowed).

    Returns:
        Tensor: ``(B, h, N, d_h)``.
    """
    if mask is None:
        # einsum: one batched product per head, counted by count_flops
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
    """The ``'local'`` init (after ConViT): ``S_k[i, j] = -strength *
    ||(p_j - p_i) - delta_k||^2``, ``delta_k`` an offset of an ``s x s``
    neighbourhood, ``s = ceil(sqrt(h))``; class rows 0, class columns the
    row's minimum.

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
    """Static logits for one layer: ``'dg'`` ``log(mean attention)``
    (:func:`attention_to_logits`), ``'random'`` truncated normal,
    ``'uniform'`` zeros, ``'local'`` :func:`local_logits`.

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
    """Static logits of a square patch grid, resized bicubically to ``grid``
    over keys then queries (as a relative position table); class rows and
    columns over their grid axis, the corner kept.

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
    """``log`` of an attention matrix, rows renormalised after clamping:
    ``softmax(attention_to_logits(A)) == A`` up to ``eps``.

    Args:
        attention (Tensor): ``(..., N, N)``, rows summing to 1.
        eps (float): floor of the probabilities.

    Returns:
        Tensor: logits of the same shape, float32.
    """
    a = attention.float().clamp_min(eps)
    return (a / a.sum(-1, keepdim=True)).log()


class AttentionStats:
    """Running per-head sums of one layer's attention ``(h, N, N)`` (one
    sample: an image, or a Swin window), squared Frobenius norms and sorted
    singular values.

    Args:
        singular_values (bool): also accumulate singular values (an SVD per
            sample and head).
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
        """Tensor: difference per head ``(h, )``, ``sqrt(E ||A - mean||^2)
        / ||mean||`` (Frobenius)."""
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
