"""Distillation shared by the classifiers (``docs/distillation.md``).

One convention: the frozen teacher is built without weights, loads them in
``init_weights`` and is held outside the student's state dict
(:mod:`.teacher` says why: checkpoint size, deployment, resume, DDP); the
prediction loss is the KL divergence with a temperature (:mod:`.losses`:
at ``T = 1`` it has the soft cross-entropy's gradient).
"""
from mmvitaccel.models.distill.losses import check_temperature, kl_divergence
from mmvitaccel.models.distill.teacher import (TeacherMixin, build_teacher,
                                               freeze, load_teacher_weights)

__all__ = [
    'TeacherMixin', 'build_teacher', 'check_temperature', 'freeze',
    'kl_divergence', 'load_teacher_weights'
]
