"""hMHSA and cFFN (``docs/hmhsa_cffn.md``); the PVTv2 parts register only
where mmdet imports."""
from mmvitaccel.models.hvit.cffn import compact_ffn
from mmvitaccel.models.hvit.hmhsa_attention import (HallucinatedAttentionMixin,
                                                    HallucinatedMultiheadAttention,
                                                    HallucinatedWindowMSA,
                                                    HViTEncoderLayer,
                                                    is_hallucinated,
                                                    resolve_hmhsa_stages,
                                                    square_grid)
from mmvitaccel.models.hvit.hvit_base import HViTHostMixin
from mmvitaccel.models.hvit.hvit_checkpoint import (hallucinated_state_dict,
                                                    pvtv2_state_dict)
from mmvitaccel.models.hvit.hvit_deit import HViTDeiT
from mmvitaccel.models.hvit.hvit_swin import HViTSwinTransformer
from mmvitaccel.registry import MODELS
from mmvitaccel.toolboxes import import_optional

import_optional(f'{__name__}.hmhsa_sra', ('mmdet', ), [], [], globals(),
                exported=['HallucinatedSRA'])
import_optional(f'{__name__}.hvit_pvtv2', ('mmdet', ),
                ['HViTPyramidVisionTransformerV2'], [MODELS], globals())

__all__ = [
    'HallucinatedAttentionMixin', 'HallucinatedMultiheadAttention',
    'HallucinatedSRA', 'HallucinatedWindowMSA', 'HViTDeiT', 'HViTEncoderLayer',
    'HViTHostMixin', 'HViTPyramidVisionTransformerV2', 'HViTSwinTransformer',
    'compact_ffn', 'hallucinated_state_dict', 'is_hallucinated',
    'pvtv2_state_dict', 'resolve_hmhsa_stages', 'square_grid'
]
