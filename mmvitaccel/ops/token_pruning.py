"""SaiT and AS-ViT: scorers ``(B, N)`` from ``attn`` ``(B, h, T, T)`` over
``[cls; x_1 .. x_N]``, masked attention with a policy ``(B, T)``; selectors
and dropping re-exported. Equations: ``docs/token_pruning_design.md`` 8."""
import torch

from mmvitaccel.ops.attention import (MASKED_LOGIT)  # noqa: F401 (the old home's name)
from mmvitaccel.ops.attention import attention_logits, masked_softmax
from mmvitaccel.ops.checks import check_choice
from mmvitaccel.ops.keep_masks import (batch_mean_keep_mask,
                                       batch_mean_kept_index, mass_keep_mask,
                                       threshold_keep_mask, topk_keep_mask,
                                       value_keep_count, value_keep_counts)  #noqa: F401
from mmvitaccel.ops.token_dropping import (gather_tokens, kept_indices,
                                           pad_kept_tokens, restore_tokens)  #noqa: F401

SCORERS = ('tis', 'asvit', 'cls', 'random')
SELECTORS = ('value', 'mass', 'threshold')
MASK_MODES = ('logits', 'policy')
#: the policy's gradient in ``'policy'`` masking (:func:`masked_attention`)
POLICY_GRADS = ('secant', 'tangent')
BATCH_MODES = ('pad', 'mean')


def masked_attention(q, k, v, scale, policy=None, mode='logits',
                     eps=1e-6, policy_grad='secant'):
    """Softmax attention with a token policy: context and probabilities.

    ``'logits'`` (SaiT): ``A = softmax(q k^T * scale + [p <= 0] *
    MASKED_LOGIT)``. ``'policy'`` (AS-ViT, DynamicViT):
    ``G_ij = p_j + (1 - p_j) [i == j]``, ``A_ij = (w_ij G_ij + eps / T) /
    (sum_j w_ij G_ij + eps)``, ``w_ij = exp(l_ij - m_i)``, ``m_i`` the max
    over visible keys. Policy gradient: ``'tangent'`` ``w_ij (v_j - o_i) /
    Z_i`` (the paper's), ``'secant'`` ``w_ij (v_j - o_i) / (Z_i + (1 - G_ij)
    w_ij)`` (bounded; ``docs/token_pruning_design.md`` section 3).

    Args:
        q (Tensor): queries ``(B, h, T, d)``.
        k (Tensor): keys ``(B, h, T, d)``.
        v (Tensor): values ``(B, h, T, d)``.
        scale (float): the logit scale, ``d ** -0.5``.
        policy (Tensor, optional): ``(B, T)`` in ``[0, 1]``, 1 for kept
            tokens; ``None``: plain softmax.
        mode (str): ``'logits'`` or ``'policy'``.
        eps (float): the policy softmax's stabiliser.
        policy_grad (str): ``'secant'`` or ``'tangent'`` (``'policy'`` mode).

    Returns:
        tuple[Tensor, Tensor]: ``A @ v`` ``(B, h, T, d)`` and ``A``
        ``(B, h, T, T)``.
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
        # m_i: max over the keys the row may see (-inf: bottom of a max)
        peak = logits.masked_fill(gate <= 0, float('-inf')).amax(
            dim=-1, keepdim=True).detach()
        weights = policy_weights(logits - peak, gate, policy_grad)
        attn = (weights + eps / T) / (weights.sum(dim=-1, keepdim=True) + eps)
    return attn @ v, attn


def policy_weights(shifted, gate, policy_grad='secant'):
    """Gated numerators ``W_ij = w_ij G_ij`` with the policy gradient of
    :func:`masked_attention`.

    The gradient to ``G_ij`` is ``w_ij`` (``'tangent'``) or ``s_ij = w_ij Z_i
    / (Z_i + (1 - G_ij) w_ij)`` (``'secant'``, computed in log space).

    Args:
        shifted (Tensor): ``l - m``, ``(B, h, T, T)``.
        gate (Tensor): ``G`` ``(B, 1, T, T)``, in ``[0, 1]``.
        policy_grad (str): ``'secant'`` or ``'tangent'``.

    Returns:
        Tensor: ``(B, h, T, T)``.
    """
    visible = gate > 0
    w = shifted.masked_fill(~visible, float('-inf')).exp()
    if policy_grad == 'tangent':
        # exp of the gap, saturated so that 0 * slope stays 0
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



def tis_score(attn, policy=None, num_extra_tokens=1):
    """SaiT's TIS: ``TIS_n = sum_h sum_m attn[h, m, n]``, normalised over n.

    Args:
        attn (Tensor): ``(B, h, T, T)`` softmax attention.
        policy (Tensor, optional): ``(B, T)``; pruned query rows left out.
        num_extra_tokens (int): leading non-patch tokens (1: the class token).

    Returns:
        Tensor: ``(B, N)``, summing to one per image.
    """
    if policy is not None:
        attn = attn * policy.to(attn.dtype)[:, None, :, None]
    columns = attn.sum(dim=(1, 2))[:, num_extra_tokens:]
    return columns / columns.sum(dim=-1, keepdim=True).clamp_min(1e-12)


def asvit_score(attn, context, num_extra_tokens=1):
    """AS-ViT's score: ``H[h, i] = ||(attn @ v)[h, i]||_2``, ``R = H / sum_h
    H``, ``S_i = sum_h R[h, i] attn[h, cls, i]``.

    Args:
        attn (Tensor): ``(B, h, T, T)`` or its class row ``(B, h, 1, T)``.
        context (Tensor): ``attn @ v`` ``(B, h, T, d)``.
        num_extra_tokens (int): leading non-patch tokens.

    Returns:
        Tensor: ``(B, N)`` scores.
    """
    importance = context.norm(dim=-1)  # H: (B, h, T)
    weights = importance / importance.sum(dim=1, keepdim=True).clamp_min(
        1e-12)  # R
    return (weights * attn[:, :, 0, :]).sum(dim=1)[:, num_extra_tokens:]


def cls_attention_score(attn, num_extra_tokens=1):
    """EViT's score: ``S_i = mean_h attn[h, cls, i]``.

    Args:
        attn (Tensor): ``(B, h, T, T)`` or its class row ``(B, h, 1, T)``.
        num_extra_tokens (int): leading non-patch tokens.

    Returns:
        Tensor: ``(B, N)`` scores.
    """
    return attn[:, :, 0, num_extra_tokens:].mean(dim=1)


def random_score(attn, num_extra_tokens=1, generator=None):
    """Random scores ``S_i ~ U(0, 1)``, the baseline a scorer must beat.

    Args:
        attn (Tensor): ``(B, h, T, T)`` or ``(B, h, 1, T)``; only its
            shape, dtype and device are used.
        num_extra_tokens (int): leading non-patch tokens.
        generator (torch.Generator, optional): default: torch's global one.

    Returns:
        Tensor: ``(B, N)`` in ``[0, 1)``.
    """
    B, T = attn.shape[0], attn.shape[-1]
    return torch.rand(B, T - num_extra_tokens, generator=generator,
                      device=attn.device).to(attn.dtype)
