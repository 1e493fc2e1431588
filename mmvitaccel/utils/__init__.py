from .tiny_data import (default_tiny_data_dir, make_tiny_ade20k,
                        make_tiny_coco, make_tiny_data, make_tiny_imagenet,
                        make_tiny_kinetics, tiny_data_root)

__all__ = [
    'default_tiny_data_dir', 'make_tiny_ade20k', 'make_tiny_coco',
    'make_tiny_data', 'make_tiny_imagenet', 'make_tiny_kinetics',
    'tiny_data_root'
]

# FLOP counting convention and interleaved benchmark
from .benchmark import (BenchmarkResult, RatioStats,  # noqa: E402
                        interleaved_benchmark)
from .flops import (AverageFlopCount, FlopCount, average_flops,  # noqa: E402
                    count_flops, count_params)

__all__ += [
    'BenchmarkResult', 'RatioStats', 'interleaved_benchmark',
    'AverageFlopCount', 'FlopCount', 'average_flops', 'count_flops',
    'count_params'
]
