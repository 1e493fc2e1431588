# Fine-tune hMHSA + cFFN Swin-T on Stanford Dogs (120 classes) at 448x448,
# the paper's transfer set-up, with the model and recipe of
# hvit_swin_t_cifar100_384.py and the data of
# _base_/datasets/stanford_dogs_448.py.
# The windows are 7x7 again: the 448 maps (112/56/28/14) divide into them.
_base_ = [
    './hvit_swin_t_cifar100_384.py', './_base_/datasets/stanford_dogs_448.py'
]

img_size = 448
num_classes = 120

model = dict(
    backbone=dict(img_size=img_size, window_size=7),
    head=dict(num_classes=num_classes))
data_preprocessor = dict(num_classes=num_classes)

train_dataloader = {{_base_.dogs_train_dataloader}}
val_dataloader = {{_base_.dogs_val_dataloader}}
test_dataloader = val_dataloader
