from .checkpoint import (MIN_LOADED_SHARE, deit_converter, deit_state_dict,
                         describe_checkpoint, load_with_report,
                         swin_state_dict, video_swin_state_dict)
from .hvit_checkpoint import (hallucinated_state_dict, pvtv2_state_dict)
from .vit import embed_tokens

__all__ = [
    'deit_converter', 'deit_state_dict', 'load_with_report', 'swin_state_dict',
    'video_swin_state_dict', 'hallucinated_state_dict', 'pvtv2_state_dict',
    'embed_tokens', 'describe_checkpoint', 'MIN_LOADED_SHARE'
]
