"""Knowledge-distillation losses shared by the distilling classifiers.

One prediction loss serves every classifier: the Kullback-Leibler divergence
between the teacher's and the student's softened distributions,
``T^2 KL(softmax(t / T) || softmax(s / T))`` (Hinton et al.'s ``T^2``
keeps the gradient's scale independent of ``T``). At ``T = 1`` it differs
from the soft cross-entropy ``-sum_c p_t log p_s`` only by the teacher's
entropy, a constant for the student: both have the gradient
``softmax(s) - softmax(t)`` with respect to the student's logits, and the KL
reads 0 when the student matches the teacher.
"""
import math
from numbers import Real

import torch.nn.functional as F

__all__ = ['kl_divergence', 'check_temperature']


def check_temperature(name, value):
    """``value`` as a positive, finite float, or a ``ValueError`` naming
    ``name``.

    Args:
        name (str): the parameter, for the message.
        value: what was given.

    Returns:
        float: ``value``.
    """
    if not isinstance(value, Real) or isinstance(value, bool) or \
            not math.isfinite(value) or value <= 0:
        raise ValueError(f'{name} must be a positive finite number (the '
                         f'softmax temperature), got {value!r}')
    return float(value)


def kl_divergence(student_logits, teacher_logits, temperature=1.):
    """``T^2 KL(softmax(t / T) || softmax(s / T))`` per row.

    Args:
        student_logits (Tensor): ``(..., K)``.
        teacher_logits (Tensor): ``(..., K)``, the target (no gradient is
            expected through it).
        temperature (float): ``T > 0``.

    Returns:
        Tensor: ``(...)`` the divergence of each row (take ``.mean()`` for
        the batch loss).
    """
    temperature = check_temperature('temperature', temperature)
    log_s = F.log_softmax(student_logits / temperature, dim=-1)
    log_t = F.log_softmax(teacher_logits / temperature, dim=-1)
    return (log_t.exp() * (log_t - log_s)).sum(dim=-1) * temperature**2
