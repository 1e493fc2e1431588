# STViT-R-Swin-S ImageNet-1k classification, trained from scratch with the
# upstream Swin-S recipe (300 epochs, AdamW, cosine, Mixup/CutMix, drop path
# 0.3), as in the paper. The STGM settings are STViT-Swin's ("the
# hyper-parameters we used in STGM are as same as STViT-Swin"): w_k 10 and 14
# with the regions inside the map, as the authors' classification code
# unfolds them. At 224 the stage-3 map is 14x14 (2x2 windows): STGM-1 sees
# 10x10 keys per window, STGM-2 attends to all 36 S1 and all 196 image
# tokens (Eq. 3), and a recovery neighbourhood of 27 covers the whole 6x6
# semantic grid: the authors' global classification form. Head: global
# average pooling.
_base_ = './_base_/swin_s_in1k.py'

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmvitaccel.STViTRSwinTransformer',
        arch='small',
        drop_path_rate=0.3,
        out_indices=(3, ),
        semantic_window=3,
        key_windows=(10, 14),
        key_region='inside',
        stgm2_keys='semantic_and_image',
        recovery_window=27,
        pooling='max'),
    neck=dict(type='GlobalAveragePooling'))
