# Fine-tune hMHSA + cFFN PVTv2-b1 on CIFAR-100 at 384x384, the paper's
# transfer set-up ("384x384 and 448x448 for training and testing for all
# models on CIFAR-100 and Stanford-Dog", "initialized from the ImageNet
# pretrained weights"), with the recipe of hvit_deit_s_cifar100_384.py
# (data, AdamW 1e-4 at batch 512, 100 epochs plus 10 at the minimum LR,
# MinLRAverageHook). The layout of hvit_pvtv2_b1_tinyimagenet.py: hMHSA in
# stages 2 and 4, cFFN everywhere (t = 0.5, r = 2), drop path 0.1. We have
# no ImageNet recipe for hMHSA/cFFN PVTv2-b1, so the backbone starts from the
# official ImageNet PVTv2-b1 weights (Q^/K^ from the first half of the heads,
# IHH, CHH and the cFFN factors new; the load report lists them); point
# init_cfg at an hMHSA/cFFN ImageNet checkpoint when there is one. PVTv2's
# position encoding is convolutional, so any input size works.
_base_ = './hvit_deit_s_cifar100_384.py'

num_classes = 100
pretrained = 'https://github.com/whai362/PVT/releases/download/v2/pvt_v2_b1.pth'  # noqa
model = dict(
    backbone=dict(
        _delete_=True,
        type='mmvitaccel.HViTPyramidVisionTransformerV2',
        arch='b1',
        hmhsa=True,
        cffn=True,
        cffn_ratio=0.5,
        cffn_branches=2,
        deploy=False,
        drop_path_rate=0.1,
        out_indices=(3, ),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(_delete_=True, type='GlobalAveragePooling'),
    head=dict(
        _delete_=True,
        type='LinearClsHead',
        num_classes=num_classes,
        in_channels=512,
        loss=dict(
            type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
        cal_acc=False))
