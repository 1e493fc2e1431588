# Fine-tune hMHSA + cFFN Swin-T on Stanford Dogs (120 classes) at 448x448,
# the paper's transfer set-up, with the model and recipe of
# hvit_swin_t_cifar100_384.py and the data of hvit_deit_s_dogs_448.py.
# The windows are 7x7 again: the 448 maps (112/56/28/14) divide into them.
_base_ = './hvit_swin_t_cifar100_384.py'

img_size = 448
num_classes = 120

model = dict(
    backbone=dict(img_size=img_size, window_size=7),
    head=dict(num_classes=num_classes))
data_preprocessor = dict(num_classes=num_classes)

data_root = 'data/stanford_dogs'
train_dataloader = dict(
    batch_size=32,
    dataset=dict(
        data_root=data_root,
        pipeline=[
            dict(type='LoadImageFromFile'),
            dict(
                type='RandomResizedCrop',
                scale=img_size,
                backend='pillow',
                interpolation='bicubic'),
            dict(type='RandomFlip', prob=0.5, direction='horizontal'),
            dict(type='PackInputs'),
        ]))
val_dataloader = dict(
    batch_size=32,
    dataset=dict(
        data_root=data_root,
        pipeline=[
            dict(type='LoadImageFromFile'),
            dict(
                type='ResizeEdge',
                scale=int(img_size * 256 / 224),
                edge='short',
                backend='pillow',
                interpolation='bicubic'),
            dict(type='CenterCrop', crop_size=img_size),
            dict(type='PackInputs'),
        ]))
test_dataloader = val_dataloader
