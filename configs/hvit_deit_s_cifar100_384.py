# Fine-tune hMHSA + cFFN DeiT-S on CIFAR-100 at 384x384 (the paper's
# transfer set-up: ImageNet-pretrained weights, 384 for CIFAR-100, 448 for
# Stanford Dogs). The backbone starts from the ImageNet training of
# configs/hvit_deit_s_in1k.py (training form); to start from an upstream
# DeiT-S instead, set model.backbone.init_cfg.checkpoint to it (the load
# report lists what hMHSA/cFFN add). The position embedding is resized from
# 14x14 to 24x24 at load time.
#
# Data layout (a folder dataset read by mmpretrain's CustomDataset; export
# CIFAR-100's images as files and list them, e.g. with
# tools/data/folder_to_lists.py data/cifar100 train val):
#   data/cifar100/meta/train.txt   "<relative path under train/> <label>"
#   data/cifar100/meta/val.txt     "<relative path under val/> <label>"
#   data/cifar100/train/...        data/cifar100/val/...
_base_ = './hvit_deit_s_in1k.py'

img_size = 384
num_classes = 100
pretrained = 'work_dirs/hvit_deit_s_in1k/epoch_310.pth'
model = dict(
    backbone=dict(
        img_size=img_size,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    head=dict(num_classes=num_classes))

data_preprocessor = dict(num_classes=num_classes)
bgr_mean = [103.53, 116.28, 123.675]
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(
        type='RandomResizedCrop',
        scale=img_size,
        backend='pillow',
        interpolation='bicubic'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(
        type='RandAugment',
        policies='timm_increasing',
        num_policies=2,
        total_level=10,
        magnitude_level=9,
        magnitude_std=0.5,
        hparams=dict(
            pad_val=[round(x) for x in bgr_mean], interpolation='bicubic')),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(
        type='Resize',
        scale=(img_size, img_size),
        backend='pillow',
        interpolation='bicubic'),
    dict(type='PackInputs'),
]
data_root = 'data/cifar100'
train_dataloader = dict(
    batch_size=64,
    dataset=dict(
        _delete_=True,
        type='CustomDataset',
        data_root=data_root,
        ann_file='meta/train.txt',
        data_prefix='train',
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=64,
    dataset=dict(
        _delete_=True,
        type='CustomDataset',
        data_root=data_root,
        ann_file='meta/val.txt',
        data_prefix='val',
        pipeline=test_pipeline))
test_dataloader = val_dataloader

# fine-tuning: AdamW 1e-4 at batch 512, 100 epochs, 5 warm-up epochs, then
# the paper's 10 extra epochs at the minimum LR (110 in all; the top-1 is
# averaged over them by MinLRAverageHook, inherited from hvit_deit_s_in1k.py)
optim_wrapper = dict(optimizer=dict(lr=1e-4, weight_decay=0.05))
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-3,
        by_epoch=True,
        end=5,
        convert_to_iter_based=True),
    dict(
        type='CosineAnnealingLR',
        eta_min=1e-6,
        by_epoch=True,
        begin=5,
        end=101,  # eta_min from epoch 100 (0-based) on
        T_max=95)
]
train_cfg = dict(max_epochs=110)
auto_scale_lr = dict(base_batch_size=512)
