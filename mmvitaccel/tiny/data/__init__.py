"""Deterministic tiny datasets in the upstream OpenMMLab on-disk formats,
one module per dataset (see :mod:`mmvitaccel.tiny.data.common` for what they
share)."""
from mmvitaccel.tiny.data.ade20k import ADE20K_LABELS, make_tiny_ade20k
from mmvitaccel.tiny.data.coco import (COCO_CATEGORIES, COCO_OBJECTS,
                                       make_tiny_coco)
from mmvitaccel.tiny.data.common import FORMAT_VERSION, MARKER
from mmvitaccel.tiny.data.imagenet import (MAX_IMAGENET_CLASSES,
                                           make_tiny_imagenet)
from mmvitaccel.tiny.data.kinds import (ENV_ROOT, TINY_DATA_KINDS,
                                        default_tiny_data_dir, make_tiny_data,
                                        tiny_data_root)
from mmvitaccel.tiny.data.kinetics import (KINETICS_DIRECTIONS,
                                           make_tiny_kinetics)

__all__ = [
    'ADE20K_LABELS', 'COCO_CATEGORIES', 'COCO_OBJECTS', 'ENV_ROOT',
    'FORMAT_VERSION', 'KINETICS_DIRECTIONS', 'MARKER', 'MAX_IMAGENET_CLASSES',
    'TINY_DATA_KINDS', 'default_tiny_data_dir', 'make_tiny_ade20k',
    'make_tiny_coco', 'make_tiny_data', 'make_tiny_imagenet',
    'make_tiny_kinetics', 'tiny_data_root'
]
