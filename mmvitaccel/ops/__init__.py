"""Pure token algorithms (plain torch; no registry, no OpenMMLab imports)."""
from .stvit import (CENTRE_POOLINGS, POOLING_MODES, IntraInterPooling,
                    adaptive_bins, bin_indices, check_pooling, pool_centres)
from .windows import (neighbourhood_windows, pad_to_multiple,
                      window_partition, window_reverse)

__all__ = [
    'CENTRE_POOLINGS', 'POOLING_MODES', 'IntraInterPooling', 'adaptive_bins',
    'bin_indices', 'check_pooling', 'pool_centres', 'neighbourhood_windows',
    'pad_to_multiple', 'window_partition', 'window_reverse'
]
from .dgssa import (INIT_MODES, LOG_EPS, MASK_VALUE, AttentionStats,
                    attention_to_logits,
                    check_init_mode, init_static_logits, local_logits,
                    static_attention)
from .glad import (GLAD, accuracy_metric, architecture_flops, glad_flops,
                   glad_search, layer_flops, retained_energy, token_counts)

__all__ += [
    'INIT_MODES', 'LOG_EPS', 'MASK_VALUE', 'AttentionStats',
    'attention_to_logits',
    'check_init_mode', 'init_static_logits', 'local_logits',
    'static_attention', 'GLAD', 'accuracy_metric', 'architecture_flops',
    'glad_flops', 'glad_search', 'layer_flops', 'retained_energy',
    'token_counts'
]
