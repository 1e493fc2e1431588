"""Pure token algorithms (plain torch; no registry, no OpenMMLab imports)."""
from .stvit import (POOLING_MODES, IntraInterPooling, adaptive_bins,
                    bin_indices, pool_centres)
from .windows import (neighbourhood_windows, pad_to_multiple,
                      window_partition, window_reverse)

__all__ = [
    'POOLING_MODES', 'IntraInterPooling', 'adaptive_bins', 'bin_indices',
    'pool_centres', 'neighbourhood_windows', 'pad_to_multiple',
    'window_partition', 'window_reverse'
]
