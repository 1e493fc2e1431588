# STViT-R-Swin-S Cascade Mask R-CNN 3x on COCO (Swin paper recipe: AdamW
# lr 1e-4, wd 0.05, 36 epochs, steps 27/33, 4conv1fc GIoU heads, multi-scale
# 480-800 + crop, drop path 0.2). Stage 3 = 3 dumbbell units, w_s=3,
# w_k=(14, 21) centred on each window, recovery neighbourhood 27, as in the
# authors' detection code; STGM-2 keys Concat(S1, X) as the paper's Eq. 3
# (the detection code uses X only: stgm2_keys='image'). The Swin-S arguments
# come from the base recipe. As in the paper, the backbone starts from the
# authors' released STViT-R-Swin-S ImageNet checkpoint (their README), read
# by stvit_r_authors_converter; it needs their convolutional stem and layer
# scale (the layout their detection code shares).
_base_ = './_base_/swin_s_cascade_mask_rcnn_3x_coco.py'

pretrained = 'https://huggingface.co/csncsn/STViT-R/resolve/main/STViT-R-Swin-S.pth'  # noqa

model = dict(
    backbone=dict(
        type='mmvitaccel.STViTRSwinTransformer',
        semantic_window=3,
        key_windows=(14, 21),
        key_region='centred',
        stgm2_keys='semantic_and_image',
        recovery_window=27,
        pooling='max',
        stem='conv',
        layer_scale=1e-5,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)))
