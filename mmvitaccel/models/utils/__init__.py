from .checkpoint import (MIN_LOADED_SHARE, compare_state_dict, deit_converter,
                         deit_state_dict, loaded_share,
                         describe_checkpoint, inflate_2d_swin,
                         load_with_report, swin_state_dict,
                         video_swin_state_dict)
from .checks import (as_int_tuple, check_finite, check_in_channels, check_int,
                     check_int_pair)
from .hvit_checkpoint import (hallucinated_state_dict, pvtv2_state_dict)
from .pretrained import PretrainedMixin
from .static_checkpoint import (fresh_static_init,
                                static_attention_state_dict)
from .swin import SWIN_ARCHS, SwinBase, swin_config
from .vit import embed_tokens

__all__ = [
    'compare_state_dict', 'loaded_share', 'deit_converter', 'deit_state_dict', 'load_with_report', 'swin_state_dict',
    'video_swin_state_dict', 'inflate_2d_swin', 'hallucinated_state_dict',
    'pvtv2_state_dict',
    'embed_tokens', 'describe_checkpoint', 'MIN_LOADED_SHARE',
    'as_int_tuple', 'check_finite', 'check_in_channels', 'check_int',
    'check_int_pair', 'PretrainedMixin',
    'static_attention_state_dict', 'fresh_static_init', 'SWIN_ARCHS',
    'SwinBase',
    'swin_config'
]
