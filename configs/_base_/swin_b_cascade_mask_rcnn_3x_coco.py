# Swin-B Cascade Mask R-CNN 3x on COCO: the Swin-S recipe with Swin-B
# (embed 128, heads 4/8/16/32, drop path 0.3), the baseline of
# stvit_r_swin_b_coco.py.
_base_ = './swin_s_cascade_mask_rcnn_3x_coco.py'

pretrained = 'https://github.com/SwinTransformer/storage/releases/download/v1.0.0/swin_base_patch4_window7_224.pth'  # noqa
model = dict(
    backbone=dict(
        embed_dims=128,
        num_heads=[4, 8, 16, 32],
        drop_path_rate=0.3,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[128, 256, 512, 1024]))
