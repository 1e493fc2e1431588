"""Knowledge-distillation losses shared by the distilling classifiers (the
KL against GLAD's soft cross-entropy: ``docs/distillation.md``)."""
import math
from numbers import Real

import torch.nn.functional as F

__all__ = ['kl_divergence', 'check_temperature']


def check_temperature(name, value):
    """``value`` as a positive finite float, else a ``ValueError``.

    Args:
        name (str): the parameter, for the message.
        value: what was given.
    """
    if not isinstance(value, Real) or isinstance(value, bool) or \
            not math.isfinite(value) or value <= 0:
        raise ValueError(f'{name} must be a positive finite number (the '
                         f'softmax temperature), got {value!r}')
    return float(value)


def kl_divergence(student_logits, teacher_logits, temperature=1.):
    """``T^2 KL(softmax(t / T) || softmax(s / T))`` per row (Hinton's
    ``T^2`` keeps the gradient's scale independent of ``T``).

    Args:
        student_logits (Tensor): ``(..., K)``.
        teacher_logits (Tensor): ``(..., K)``, the target (no gradient).
        temperature (float): ``T > 0``.

    Returns:
        Tensor: ``(...)``, one divergence per row.
    """
    temperature = check_temperature('temperature', temperature)
    log_s = F.log_softmax(student_logits / temperature, dim=-1)
    log_t = F.log_softmax(teacher_logits / temperature, dim=-1)
    return (log_t.exp() * (log_t - log_s)).sum(dim=-1) * temperature**2
