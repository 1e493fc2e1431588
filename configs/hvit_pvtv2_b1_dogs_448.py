# Fine-tune hMHSA + cFFN PVTv2-b1 on Stanford Dogs (120 classes) at 448x448,
# the paper's transfer set-up, with the model and recipe of
# hvit_pvtv2_b1_cifar100_384.py and the data of
# _base_/datasets/stanford_dogs_448.py.
_base_ = [
    './hvit_pvtv2_b1_cifar100_384.py', './_base_/datasets/stanford_dogs_448.py'
]

img_size = 448
num_classes = 120

model = dict(head=dict(num_classes=num_classes))
data_preprocessor = dict(num_classes=num_classes)

train_dataloader = {{_base_.dogs_train_dataloader}}
val_dataloader = {{_base_.dogs_val_dataloader}}
test_dataloader = val_dataloader
