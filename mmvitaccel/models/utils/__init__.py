"""What the methods share: host size tables, checks, checkpoint readers,
the load report, the pretrained-weights mixin, ViT helpers, the Swin base."""
from mmvitaccel.models.utils.archs import DEIT_ARCHS, SWIN_ARCHS
from mmvitaccel.models.utils.checkpoint import (deit_converter,
                                                deit_state_dict,
                                                inflate_2d_swin,
                                                swin_state_dict,
                                                video_swin_state_dict)
from mmvitaccel.models.utils.checks import (as_int_tuple, check_finite,
                                            check_in_channels, check_int,
                                            check_int_pair)
from mmvitaccel.models.utils.load_report import (MIN_LOADED_SHARE,
                                                 compare_state_dict,
                                                 describe_checkpoint,
                                                 load_with_report,
                                                 loaded_share, report_summary)
from mmvitaccel.models.utils.pretrained import PretrainedMixin
from mmvitaccel.models.utils.vit import embed_tokens
from mmvitaccel.toolboxes import import_optional

import_optional(f'{__name__}.swin', ('mmdet', ), [], [], globals(),
                exported=['SwinBase', 'swin_config'])

__all__ = [
    'DEIT_ARCHS', 'MIN_LOADED_SHARE', 'PretrainedMixin', 'SWIN_ARCHS',
    'SwinBase', 'as_int_tuple', 'check_finite', 'check_in_channels',
    'check_int', 'check_int_pair', 'compare_state_dict', 'deit_converter',
    'deit_state_dict', 'describe_checkpoint', 'embed_tokens',
    'inflate_2d_swin', 'load_with_report', 'loaded_share', 'report_summary',
    'swin_config', 'swin_state_dict', 'video_swin_state_dict'
]
