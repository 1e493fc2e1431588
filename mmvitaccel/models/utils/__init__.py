from .checkpoint import (load_with_report, swin_state_dict,
                         video_swin_state_dict)

__all__ = ['load_with_report', 'swin_state_dict', 'video_swin_state_dict']
