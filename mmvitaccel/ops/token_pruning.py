"""Token pruning operators shared by SaiT and AS-ViT: scorers, selectors and
the batched execution of variable keep counts.

Papers: Li et al., *SaiT: Sparse Vision Transformers through Adaptive Token
Pruning* (2022); Liu et al., *Adaptive Sparse ViT: Towards Learnable Adaptive
Token Pruning by Fully Exploiting Self-Attention* (IJCAI 2023). The
equations the papers' text lost are restated in
``docs/token_pruning_design.md#8-equations-we-adopt``.

Conventions. The token sequence is ``[cls; x_1 .. x_N]``: one class token
(index 0) followed by ``N`` patch tokens. Attention probabilities are
``attn`` ``(B, h, T, T)`` (rows: queries, columns: keys). Scores are
``(B, N)``, over the patch tokens only (the class token is always kept).
A *keep mask* is ``(B, N)`` float or bool over patch tokens; a *policy* is
``(B, T)`` float with the class token's entry 1.

Four scorers:

* :func:`tis_score` (SaiT): ``TIS_n = sum_h sum_m attn[h, m, n]``, the
  column sums of the attention over heads and rows, normalised to a
  distribution over the patch tokens;
* :func:`asvit_score` (AS-ViT): head importance ``H[h, i] =
  ||(attn @ v)[h, i]||_2``, ``R = H / sum_h H``,
  ``S_i = sum_h R[h, i] * attn[h, cls, i]``;
* :func:`cls_attention_score` (EViT, the reference):
  ``S_i = mean_h attn[h, cls, i]``;
* :func:`random_score` (the floor a scorer must beat): ``S_i ~ U(0, 1)``
  i.i.d., from torch's global generator.

Three selectors (:mod:`mmvitaccel.ops.keep_masks`, whose names this
module re-exports):

* :func:`value_keep_count` / :func:`topk_keep_mask` (SaiT value): the
  ``K`` highest scores, ``K = round(rho * (N + 1))`` tokens *with* the class
  token, i.e. ``K - 1`` patch tokens;
* :func:`mass_keep_mask` (SaiT mass): the fewest tokens whose cumulative
  (sorted, normalised) score reaches ``M_th``;
* :func:`threshold_keep_mask` (AS-ViT): ``M_i = sigmoid((S_i - theta) /
  tau)``, ``tau = 1e-4``, hardened to ``S_i > theta`` with a straight-through
  estimator (the forward value is the hard mask, the gradient the soft one).

Batched execution of per-image keep counts:

* training keeps every token and masks the attention:
  :func:`masked_attention` with ``mode='logits'`` adds a large negative
  logit to pruned keys (SaiT adds ``-65000``; we add the shared
  :data:`~mmvitaccel.ops.attention.MASKED_LOGIT`, ``-1e4``, which also
  gives them exactly zero weight and stays finite in float16), with ``mode='policy'`` the softmax is
  multiplied by the policy with the diagonal kept, so that the soft mask of
  AS-ViT receives gradients (DynamicViT's policy softmax);
* inference drops tokens for real (:func:`gather_tokens`). Per image (batch
  1) that is exact. A batch with different counts is either padded to its
  largest count with the padding masked out of the keys
  (:func:`pad_kept_tokens`, exact: every image gets what it gets alone) or
  cut to the batch-mean count (:func:`batch_mean_kept_index`, AS-ViT's
  batched inference: images with more tokens above the threshold lose some,
  images with fewer keep some below it; no mask, every image runs the same
  dense kernels, faster, and the accuracy moves a little).

Plain torch: no registry, no OpenMMLab imports.
"""
import torch

from mmvitaccel.ops.attention import (MASKED_LOGIT)  # noqa: F401 (the old home's name)
from mmvitaccel.ops.attention import attention_logits, masked_softmax
from mmvitaccel.ops.checks import check_choice
# the selectors live in their own module; the names stay here too
from mmvitaccel.ops.keep_masks import (batch_mean_keep_mask,
                                       batch_mean_kept_index, mass_keep_mask,
                                       threshold_keep_mask, topk_keep_mask,
                                       value_keep_count, value_keep_counts)  #noqa: F401
# dropping tokens for real lives in its own module; the names stay here too
from mmvitaccel.ops.token_dropping import (gather_tokens, kept_indices,
                                           pad_kept_tokens, restore_tokens)  #noqa: F401

SCORERS = ('tis', 'asvit', 'cls', 'random')
SELECTORS = ('value', 'mass', 'threshold')
MASK_MODES = ('logits', 'policy')
#: the policy's gradient in ``'policy'`` masking (:func:`masked_attention`)
POLICY_GRADS = ('secant', 'tangent')
BATCH_MODES = ('pad', 'mean')

# --- attention ---------------------------------------------------------------


def masked_attention(q, k, v, scale, policy=None, mode='logits',
                     eps=1e-6, policy_grad='secant'):
    """Softmax attention with a token policy, returning the probabilities.

    ``mode='logits'`` (SaiT): ``A = softmax(q k^T * scale + [p <= 0] *
    MASKED_LOGIT)`` over the keys (:func:`~.attention.masked_softmax`);
    pruned keys get a probability of zero, no gradient reaches the policy.

    ``mode='policy'`` (AS-ViT, after DynamicViT):
    ``G_ij = p_j + (1 - p_j) * [i == j]`` (each token keeps itself),
    ``A_ij = (exp(l_ij - m_i) * G_ij + eps / T) /
    (sum_j exp(l_ij - m_i) * G_ij + eps)`` with ``m_i`` the largest logit
    of row ``i`` among its keys with ``G_ij > 0`` (DynamicViT subtracts the
    max over all keys; when a pruned key holds it, ``eps`` swamps the
    row); the policy is differentiable.

    The policy's gradient (``policy_grad``; the values are the same either
    way). With ``w_ij = exp(l_ij - m_i)`` and ``Z_i = sum_j w_ij G_ij``,
    the output ``o_i = sum_j A_ij v_j`` has the derivative
    ``d o_i / d G_ij = w_ij (v_j - o_i) / Z_i``:

    * ``'tangent'``: that derivative, the paper's (AS-ViT §3.3 masks "the
      attention matrix [Rao et al., 2021]"; DynamicViT's ``A_ij = exp(l_ij)
      G_ij / sum_k exp(l_ik) G_ik``, differentiated). For a pruned key
      (``G_ij = 0``) ``w_ij`` is unbounded: a key whose logit lies 25 above
      the row's visible peak gets ``e^25``, about ``7e10`` times the row's
      output gradient (``docs/token_pruning_design.md``, "Why AS-ViT's
      gradients exploded");
    * ``'secant'`` (default): the slope of the secant from ``G_ij`` to a
      fully kept key, ``(o_i(G_ij = 1) - o_i(G_ij)) / (1 - G_ij) = w_ij
      (v_j - o_i) / (Z_i + (1 - G_ij) w_ij)``: what readmitting the key
      would change, at most ``|v_j - o_i|``. For kept keys (``G_ij = 1``)
      it is the tangent; it differs only where the tangent describes an
      infinitesimal readmission that the hard mask never makes.

    Args:
        q (Tensor): queries ``(B, h, T, d)``.
        k (Tensor): keys ``(B, h, T, d)``.
        v (Tensor): values ``(B, h, T, d)``.
        scale (float): the logit scale, ``d ** -0.5``.
        policy (Tensor, optional): ``(B, T)`` in ``[0, 1]``, 1 for kept
            tokens; ``None`` means every token is kept (plain softmax).
        mode (str): ``'logits'`` or ``'policy'``.
        eps (float): the policy softmax's stabiliser.
        policy_grad (str): ``'secant'`` or ``'tangent'``
            (:data:`POLICY_GRADS`), the policy's gradient in ``'policy'``
            mode.

    Returns:
        tuple[Tensor, Tensor]: the context ``A @ v`` ``(B, h, T, d)`` and the
        probabilities ``A`` ``(B, h, T, T)``.
    """
    check_choice('mask mode', mode, MASK_MODES)
    check_choice('policy_grad', policy_grad, POLICY_GRADS)
    logits = attention_logits(q, k, scale)
    if policy is None:
        attn = logits.softmax(dim=-1)
    elif mode == 'logits':
        attn = masked_softmax(logits, (policy > 0)[:, None, None, :])
    else:
        T = logits.shape[-1]
        # made in float32 and cast: torch < 2.2 has no bfloat16 eye on CPU
        eye = torch.eye(T, device=logits.device).to(logits.dtype)
        p = policy.to(logits.dtype)[:, None, None, :]
        gate = p + (1. - p) * eye
        # the max over the keys each row may see (not over all keys), so
        # that eps stays negligible beside the row's sum; -inf (not
        # MASKED_LOGIT) since this is the bottom of a max over logits that
        # may lie anywhere, and the diagonal is always visible
        peak = logits.masked_fill(gate <= 0, float('-inf')).amax(
            dim=-1, keepdim=True).detach()
        weights = policy_weights(logits - peak, gate, policy_grad)
        attn = (weights + eps / T) / (weights.sum(dim=-1, keepdim=True) + eps)
    return attn @ v, attn


def policy_weights(shifted, gate, policy_grad='secant'):
    """The gated softmax numerators ``W_ij = w_ij G_ij``, ``w_ij =
    exp(l_ij - m_i)``, with the policy gradient of :func:`masked_attention`.

    The value is ``w_ij G_ij`` either way (hidden keys, ``G_ij = 0``, give
    exactly 0, even where ``l_ij - m_i`` would overflow ``exp``); the
    gradient to the logits is the paper's. The gradient to ``G_ij`` is
    ``w_ij`` (``'tangent'``) or ``s_ij = w_ij Z_i / (Z_i + (1 - G_ij)
    w_ij)`` (``'secant'``), computed in log space: ``log s_ij = log w_ij +
    log Z_i - logaddexp(log Z_i, log(1 - G_ij) + log w_ij)``, finite for any
    logit gap. Through ``A_ij = W_ij / sum_k W_ik`` it gives ``d o_i / d
    G_ij = s_ij (v_j - o_i) / Z_i``, the secant slope.

    Args:
        shifted (Tensor): ``l - m``, ``(B, h, T, T)``, at most 0 where
            ``G > 0``.
        gate (Tensor): ``G`` ``(B, 1, T, T)``, in ``[0, 1]``.
        policy_grad (str): ``'secant'`` or ``'tangent'``.

    Returns:
        Tensor: ``(B, h, T, T)``.
    """
    visible = gate > 0
    w = shifted.masked_fill(~visible, float('-inf')).exp()
    if policy_grad == 'tangent':
        # exp of the gap, unmasked: the unbounded factor of the paper's
        # reading (overflow saturates at the dtype's largest finite value,
        # so that the forward value stays exactly 0 where G = 0)
        slope = shifted.detach().exp().clamp_max(
            torch.finfo(shifted.dtype).max)  # inf * 0 would be NaN
    else:
        with torch.no_grad():
            fixed = gate.detach()
            log_z = (w * fixed).sum(dim=-1, keepdim=True).log()
            log_open = torch.log1p(-fixed.clamp_max(1.)) + shifted
            secant = (shifted + log_z - torch.logaddexp(log_z, log_open)).exp()
            # a fully kept key: the tangent w itself, to the bit
            slope = torch.where(fixed >= 1., w, secant)
    return w * gate.detach() + slope * (gate - gate.detach())


# --- scorers -----------------------------------------------------------------


def tis_score(attn, policy=None, num_extra_tokens=1):
    """SaiT token importance score.

    ``TIS_n = sum_h sum_m attn[h, m, n]`` over the kept query rows ``m``,
    then ``TIS_n / sum_n' TIS_n'`` over the patch tokens.

    Args:
        attn (Tensor): ``(B, h, T, T)`` softmax attention.
        policy (Tensor, optional): ``(B, T)``; rows of pruned queries are
            left out of the sum.
        num_extra_tokens (int): leading tokens that are not patches (1: the
            class token).

    Returns:
        Tensor: ``(B, N)`` scores summing to one per image.
    """
    if policy is not None:
        attn = attn * policy.to(attn.dtype)[:, None, :, None]
    columns = attn.sum(dim=(1, 2))[:, num_extra_tokens:]
    return columns / columns.sum(dim=-1, keepdim=True).clamp_min(1e-12)


def asvit_score(attn, context, num_extra_tokens=1):
    """AS-ViT head-importance-weighted class attention.

    ``H[h, i] = ||(attn @ v)[h, i]||_2``, ``R[h, i] = H[h, i] / sum_h
    H[h, i]``, ``S_i = sum_h R[h, i] * attn[h, cls, i]``.

    Args:
        attn (Tensor): ``(B, h, T, T)`` softmax attention, or only its
            class-token row ``(B, h, 1, T)``.
        context (Tensor): ``attn @ v`` ``(B, h, T, d)``.
        num_extra_tokens (int): leading non-patch tokens; the class token
            is index 0.

    Returns:
        Tensor: ``(B, N)`` scores.
    """
    importance = context.norm(dim=-1)  # H: (B, h, T)
    weights = importance / importance.sum(dim=1, keepdim=True).clamp_min(
        1e-12)  # R
    return (weights * attn[:, :, 0, :]).sum(dim=1)[:, num_extra_tokens:]


def cls_attention_score(attn, num_extra_tokens=1):
    """Class attention averaged over heads (EViT): ``S_i = mean_h
    attn[h, cls, i]``.

    Args:
        attn (Tensor): ``(B, h, T, T)`` softmax attention, or only its
            class-token row ``(B, h, 1, T)``.
        num_extra_tokens (int): leading non-patch tokens.

    Returns:
        Tensor: ``(B, N)`` scores.
    """
    return attn[:, :, 0, num_extra_tokens:].mean(dim=1)


def random_score(attn, num_extra_tokens=1, generator=None):
    """Uniform random scores, ``S_i ~ U(0, 1)`` i.i.d.: any selector then
    keeps a uniformly random subset (of its size), the floor that an
    informed scorer must beat.

    Args:
        attn (Tensor): ``(B, h, T, T)`` attention or its class row ``(B, h,
            1, T)`` (only the key count, dtype and device are used).
        num_extra_tokens (int): leading non-patch tokens.
        generator (torch.Generator, optional): default: torch's global one
            (seeded per step by ``StepSeedHook`` in training; seed it with
            ``torch.manual_seed`` before an evaluation).

    Returns:
        Tensor: ``(B, N)`` scores in ``[0, 1)``.
    """
    B, T = attn.shape[0], attn.shape[-1]
    return torch.rand(B, T - num_extra_tokens, generator=generator,
                      device=attn.device).to(attn.dtype)
