from .tiny_data import (default_tiny_data_dir, make_tiny_ade20k,
                        make_tiny_coco, make_tiny_data, make_tiny_imagenet,
                        make_tiny_kinetics, tiny_data_root)

__all__ = [
    'default_tiny_data_dir', 'make_tiny_ade20k', 'make_tiny_coco',
    'make_tiny_data', 'make_tiny_imagenet', 'make_tiny_kinetics',
    'tiny_data_root'
]
