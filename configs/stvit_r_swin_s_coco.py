# STViT-R-Swin-S Cascade Mask R-CNN 3x on COCO (Swin paper recipe: AdamW
# lr 1e-4, wd 0.05, 36 epochs, steps 27/33, 4conv1fc GIoU heads, multi-scale
# 480-800 + crop). Stage 3 = 3 dumbbell units, w_s=3, w_k=(14, 21), recovery
# neighbourhood 27, as in the authors' detection code. Initialised from the
# official ImageNet-1k Swin-S weights (the authors started from their own
# STViT-R ImageNet checkpoint; give it here instead if you have it).
_base_ = './_base_/swin_s_cascade_mask_rcnn_3x_coco.py'

pretrained = 'https://github.com/SwinTransformer/storage/releases/download/v1.0.0/swin_small_patch4_window7_224.pth'  # noqa
model = dict(
    backbone=dict(
        _delete_=True,
        type='mmvitaccel.STViTRSwinTransformer',
        arch='small',
        window_size=7,
        mlp_ratio=4,
        qkv_bias=True,
        qk_scale=None,
        drop_rate=0.,
        attn_drop_rate=0.,
        drop_path_rate=0.2,
        patch_norm=True,
        out_indices=(0, 1, 2, 3),
        with_cp=False,
        semantic_window=3,
        key_windows=(14, 21),
        recovery_window=27,
        pooling='max',
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)))
