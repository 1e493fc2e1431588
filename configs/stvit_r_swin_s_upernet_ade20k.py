# STViT-R-Swin-S UperNet on ADE20K: the mmseg Swin-S recipe (512x512 crops,
# AdamW lr 6e-5, poly schedule) with 3 dumbbell units in stage 3, w_s=3, and
# the paper's 240k iterations (Swin used 160k). The backbone starts from the
# authors' released STViT-R-Swin-S ImageNet checkpoint, as the paper does
# (their convolutional stem and layer scale; see stvit_r_swin_s_coco.py).
_base_ = './_base_/swin_s_upernet_ade20k.py'

pretrained = 'https://huggingface.co/csncsn/STViT-R/resolve/main/STViT-R-Swin-S.pth'  # noqa

max_iters = 240000
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
train_cfg = dict(max_iters=max_iters, val_interval=16000)
param_scheduler = [
    dict(
        type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(
        type='PolyLR',
        eta_min=0.0,
        power=1.0,
        begin=1500,
        end=max_iters,
        by_epoch=False)
]
