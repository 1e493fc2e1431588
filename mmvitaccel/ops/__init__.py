"""Pure token algorithms (plain torch; no registry, no OpenMMLab imports)."""
from .stvit import (CENTRE_POOLINGS, POOLING_MODES, IntraInterPooling,
                    adaptive_bins, bin_indices, check_pooling, pool_centres)
from .windows import (mask_or_none, neighbourhood_mask, neighbourhood_windows,
                      pad_to_multiple, window_partition, window_reverse)

__all__ = [
    'CENTRE_POOLINGS', 'POOLING_MODES', 'IntraInterPooling', 'adaptive_bins',
    'bin_indices', 'check_pooling', 'pool_centres', 'mask_or_none',
    'neighbourhood_mask', 'neighbourhood_windows', 'pad_to_multiple',
    'window_partition', 'window_reverse'
]
from .cffn import (CompactLinear, RepLinear, cffn_flops, cffn_params,  # noqa: E402
                   compact_dims, ffn_flops, ffn_params, switch_to_deploy)
from .hmhsa import (AttentionHallucination, CrossHeadHallucination,  # noqa: E402
                    IntraHeadHallucination, check_even_heads,
                    hallucinated_attention, hmhsa_flops, hmhsa_params,
                    mhsa_flops, mhsa_params, split_qkv_weights)

__all__ += [
    'CompactLinear', 'RepLinear', 'cffn_flops', 'cffn_params', 'compact_dims',
    'ffn_flops', 'ffn_params', 'switch_to_deploy', 'AttentionHallucination',
    'CrossHeadHallucination', 'IntraHeadHallucination', 'check_even_heads',
    'hallucinated_attention', 'hmhsa_flops', 'hmhsa_params', 'mhsa_flops',
    'mhsa_params', 'split_qkv_weights'
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
