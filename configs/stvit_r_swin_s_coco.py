# STViT-R-Swin-S Cascade Mask R-CNN 3x on COCO (Swin paper recipe: AdamW
# lr 1e-4, wd 0.05, 36 epochs, steps 27/33, 4conv1fc GIoU heads, multi-scale
# 480-800 + crop, drop path 0.2). Stage 3 = 3 dumbbell units, w_s=3,
# w_k=(14, 21) centred on each window, recovery neighbourhood 27, as in the
# authors' detection code; STGM-2 keys Concat(S1, X) as the paper's Eq. 3
# (the detection code uses X only: stgm2_keys='image').
# The Swin-S arguments and the official ImageNet-1k Swin-S weights come from
# the base recipe (the authors started from their own STViT-R ImageNet
# checkpoint; give it in init_cfg instead if you have it).
_base_ = './_base_/swin_s_cascade_mask_rcnn_3x_coco.py'

model = dict(
    backbone=dict(
        type='mmvitaccel.STViTRSwinTransformer',
        semantic_window=3,
        key_windows=(14, 21),
        key_region='centred',
        stgm2_keys='semantic_and_image',
        recovery_window=27,
        pooling='max'))
