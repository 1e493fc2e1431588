from .checkpoint import (deit_converter, deit_state_dict, inflate_2d_swin,
                         swin_state_dict, video_swin_state_dict)
from .checks import (as_int_tuple, check_finite, check_in_channels, check_int,
                     check_int_pair)
from .hvit_checkpoint import (hallucinated_state_dict, pvtv2_state_dict)
from .load_report import (MIN_LOADED_SHARE, compare_state_dict,
                          describe_checkpoint, load_with_report, loaded_share,
                          report_summary)
from .pretrained import PretrainedMixin
from .static_checkpoint import (fresh_static_init,
                                static_attention_state_dict)
from .vit import embed_tokens

__all__ = [
    'compare_state_dict', 'loaded_share', 'deit_converter', 'deit_state_dict', 'load_with_report', 'swin_state_dict',
    'video_swin_state_dict', 'inflate_2d_swin', 'hallucinated_state_dict',
    'pvtv2_state_dict',
    'embed_tokens', 'describe_checkpoint', 'MIN_LOADED_SHARE',
    'report_summary',
    'as_int_tuple', 'check_finite', 'check_in_channels', 'check_int',
    'check_int_pair', 'PretrainedMixin',
    'static_attention_state_dict', 'fresh_static_init', 'SWIN_ARCHS',
    'SwinBase',
    'swin_config'
]

from ...toolboxes import import_optional  # noqa: E402
from .archs import SWIN_ARCHS  # noqa: E402

import_optional(f'{__name__}.swin', ('mmdet', ), [], [], globals(),
                exported=['SwinBase', 'swin_config'])
