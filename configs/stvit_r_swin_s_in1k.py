# STViT-R-Swin-S ImageNet-1k classification, trained from scratch with the
# upstream Swin-S recipe (300 epochs, AdamW, cosine, Mixup/CutMix, drop path
# 0.3), as in the paper. At 224 the stage-3 map is 14x14 (2x2 windows): w_k
# is 10 for STGM-1 as the paper states; 21 lets STGM-2 see the whole map and
# a recovery neighbourhood of 27 covers the whole 6x6 semantic grid, which
# is the authors' global classification form. Head: global average pooling.
_base_ = './_base_/swin_s_in1k.py'

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmvitaccel.STViTRSwinTransformer',
        arch='small',
        drop_path_rate=0.3,
        out_indices=(3, ),
        semantic_window=3,
        key_windows=(10, 21),
        recovery_window=27,
        pooling='max'),
    neck=dict(type='GlobalAveragePooling'))
