# Fine-tune hMHSA + cFFN Swin-T on CIFAR-100 at 384x384, the paper's
# transfer set-up ("384x384 and 448x448 for training and testing for all
# models on CIFAR-100 and Stanford-Dog", "initialized from the ImageNet
# pretrained weights"), with the recipe of hvit_deit_s_cifar100_384.py
# (data, AdamW 1e-4 at batch 512, 100 epochs plus 10 at the minimum LR,
# MinLRAverageHook). The backbone starts from the ImageNet training of
# configs/hvit_swin_t_in1k.py (training form); an upstream Swin-T checkpoint
# also loads (the report lists what hMHSA/cFFN add). At 384 the windows are
# 12x12, as upstream's Swin at 384 (the maps 96/48/24/12 divide into them);
# the relative position tables are resized at load time. Drop path 0.2 as
# the Swin-T recipe.
_base_ = './hvit_deit_s_cifar100_384.py'

img_size = 384
num_classes = 100
pretrained = 'work_dirs/hvit_swin_t_in1k/epoch_310.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='mmvitaccel.HViTSwinTransformer',
        arch='tiny',
        img_size=img_size,
        window_size=12,
        drop_path_rate=0.2,
        hmhsa=True,
        cffn=True,
        cffn_ratio=0.5,
        cffn_branches=2,
        deploy=False,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(_delete_=True, type='GlobalAveragePooling'),
    head=dict(
        _delete_=True,
        type='LinearClsHead',
        num_classes=num_classes,
        in_channels=768,
        loss=dict(
            type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
        cal_acc=False))
