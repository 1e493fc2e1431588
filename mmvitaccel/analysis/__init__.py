"""Measuring models: FLOPs (:mod:`.flops`), interleaved timing
(:mod:`.timing`), attention statistics (:mod:`.attention_stats`)."""
from mmvitaccel.analysis.attention_stats import (HOSTS, add_attention_hooks,
                                                 build_host_backbone,
                                                 build_loader,
                                                 build_preprocessor,
                                                 collect_attention,
                                                 dgssa_checkpoint,
                                                 interior_windows)
from mmvitaccel.analysis.flops import (EXTRA_FLOP_HANDLES, ZERO_FLOP_OPS,
                                       AverageFlopCount, FlopCount,
                                       average_flops, baddbmm_flop_jit,
                                       build_flop_analyzer, count_flops,
                                       count_params, einsum_exact_flop_jit,
                                       sdpa_flop_jit)
from mmvitaccel.analysis.timing import (BenchmarkResult, RatioStats,
                                        default_num_threads,
                                        interleaved_benchmark)

__all__ = [
    'EXTRA_FLOP_HANDLES', 'HOSTS', 'ZERO_FLOP_OPS', 'AverageFlopCount',
    'BenchmarkResult', 'FlopCount', 'RatioStats', 'add_attention_hooks',
    'average_flops', 'baddbmm_flop_jit', 'build_flop_analyzer',
    'build_host_backbone', 'build_loader', 'build_preprocessor',
    'collect_attention', 'count_flops', 'count_params', 'default_num_threads',
    'dgssa_checkpoint', 'einsum_exact_flop_jit', 'interior_windows',
    'interleaved_benchmark', 'sdpa_flop_jit'
]
