"""Distillation shared by the classifiers: frozen teachers built without
weights and loaded in ``init_weights`` (:mod:`.teacher`), and the KD loss
(:mod:`.losses`). See ``docs/distillation.md``."""
from .losses import check_temperature, kl_divergence
from .teacher import (TeacherMixin, build_teacher, freeze,
                      load_teacher_weights)

__all__ = [
    'TeacherMixin', 'build_teacher', 'check_temperature', 'freeze',
    'kl_divergence', 'load_teacher_weights'
]
