# Fine-tune hMHSA + cFFN DeiT-S on Stanford Dogs (120 classes) at 448x448,
# the paper's transfer set-up, with the CIFAR-100 recipe of
# hvit_deit_s_cifar100_384.py (position embedding resized to 28x28).
#
# Data layout (folder dataset, mmpretrain's CustomDataset): split the
# official Images/<wnid>-<breed>/ folders by train_list.mat / test_list.mat
# into train/<wnid>-<breed>/ and val/<wnid>-<breed>/, then list them with
#   python tools/data/folder_to_lists.py data/stanford_dogs train val
#   data/stanford_dogs/meta/{train,val}.txt  "<class>/<image>.jpg <label>"
#   data/stanford_dogs/{train,val}/<class>/<image>.jpg
_base_ = [
    './hvit_deit_s_cifar100_384.py', './_base_/datasets/stanford_dogs_448.py'
]

img_size = 448
num_classes = 120
model = dict(
    backbone=dict(img_size=img_size), head=dict(num_classes=num_classes))
data_preprocessor = dict(num_classes=num_classes)

train_dataloader = {{_base_.dogs_train_dataloader}}
val_dataloader = {{_base_.dogs_val_dataloader}}
test_dataloader = val_dataloader
