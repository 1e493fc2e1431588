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
