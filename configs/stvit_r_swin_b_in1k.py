# STViT-R-Swin-B ImageNet-1k classification: stvit_r_swin_s_in1k.py with
# Swin-B and drop path 0.4 (the authors' Swin-B setting). mmpretrain's Swin-B
# recipe only differs from Swin-S in the backbone and head width.
_base_ = './stvit_r_swin_s_in1k.py'

model = dict(
    backbone=dict(arch='base', drop_path_rate=0.4),
    head=dict(in_channels=1024))
