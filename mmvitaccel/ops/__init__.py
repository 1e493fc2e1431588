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
from .token_pruning import (BATCH_MODES, MASK_MODES, MASKED_LOGIT, SCORERS,
                            SELECTORS, asvit_score, batch_mean_keep_mask,
                            check_choice, cls_attention_score, gather_tokens,
                            kept_indices, mass_keep_mask, masked_attention,
                            pad_kept_tokens, threshold_keep_mask, tis_score,
                            topk_keep_mask, value_keep_count,
                            value_keep_counts, vit_layer_flops,
                            restore_tokens)

__all__ += [
    'BATCH_MODES', 'MASK_MODES', 'MASKED_LOGIT', 'SCORERS', 'SELECTORS',
    'asvit_score', 'batch_mean_keep_mask', 'check_choice',
    'cls_attention_score', 'gather_tokens', 'kept_indices', 'mass_keep_mask',
    'masked_attention', 'pad_kept_tokens', 'threshold_keep_mask', 'tis_score',
    'topk_keep_mask', 'value_keep_count', 'value_keep_counts', 'vit_layer_flops',
    'restore_tokens'
]
