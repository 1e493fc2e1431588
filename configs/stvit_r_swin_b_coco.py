# STViT-R-Swin-B Cascade Mask R-CNN 3x on COCO: the Swin-S recipe of
# stvit_r_swin_s_coco.py with Swin-B (embed 128, heads 4/8/16/32), drop path
# 0.3 as in the authors' detection config, initialised from the authors'
# released STViT-R-Swin-B ImageNet checkpoint (as the paper does).
_base_ = './stvit_r_swin_s_coco.py'

pretrained = 'https://huggingface.co/csncsn/STViT-R/resolve/main/STViT-R-Swin-B.pth'  # noqa
model = dict(
    backbone=dict(
        arch='base',
        drop_path_rate=0.3,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[128, 256, 512, 1024]))
