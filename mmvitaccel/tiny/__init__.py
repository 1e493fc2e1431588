"""Everything for running a config at CPU scale on generated data: the tiny
datasets (:mod:`mmvitaccel.tiny.data`), the overlay that points a config at
them (:func:`tinyfy_config`) and :class:`TinyRunner`, which applies the
overlay for tools that know nothing of it.

This package imports nothing of mmvitaccel but :mod:`mmvitaccel.registry`:
the overlay names our hooks by their registered type strings.
"""
from mmvitaccel.tiny.data import (ADE20K_LABELS, COCO_CATEGORIES, COCO_OBJECTS,
                                  ENV_ROOT, KINETICS_DIRECTIONS, MARKER,
                                  MAX_IMAGENET_CLASSES, TINY_DATA_KINDS,
                                  default_tiny_data_dir, make_tiny_ade20k,
                                  make_tiny_coco, make_tiny_data,
                                  make_tiny_imagenet, make_tiny_kinetics,
                                  tiny_data_root)
from mmvitaccel.tiny.overlay import (DATASET_KINDS, DEFAULT_SCALE, DEFAULTS,
                                     tinyfy_config)
from mmvitaccel.tiny.runner import TinyRunner

__all__ = [
    'ADE20K_LABELS', 'COCO_CATEGORIES', 'COCO_OBJECTS', 'DATASET_KINDS',
    'DEFAULTS', 'DEFAULT_SCALE', 'ENV_ROOT', 'KINETICS_DIRECTIONS', 'MARKER',
    'MAX_IMAGENET_CLASSES', 'TINY_DATA_KINDS', 'TinyRunner',
    'default_tiny_data_dir', 'make_tiny_ade20k', 'make_tiny_coco',
    'make_tiny_data', 'make_tiny_imagenet', 'make_tiny_kinetics',
    'tiny_data_root', 'tinyfy_config'
]
