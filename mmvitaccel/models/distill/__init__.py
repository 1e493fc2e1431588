"""Distillation shared by the classifiers: frozen teachers held outside the
state dict, and the KL loss (``docs/distillation.md``)."""
from mmvitaccel.models.distill.losses import check_temperature, kl_divergence
from mmvitaccel.models.distill.teacher import (TeacherMixin, build_teacher,
                                               freeze, load_teacher_weights)

__all__ = [
    'TeacherMixin', 'build_teacher', 'check_temperature', 'freeze',
    'kl_divergence', 'load_teacher_weights'
]
