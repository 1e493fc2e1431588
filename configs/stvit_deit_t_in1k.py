# STViT-DeiT-T ImageNet-1k classification: stvit_deit_s_in1k.py on DeiT-T.
# mmpretrain's DeiT-T recipe equals its DeiT-S recipe but for the model, so
# only the backbone size and the head width change.
_base_ = './stvit_deit_s_in1k.py'

model = dict(backbone=dict(arch='deit-tiny'), head=dict(in_channels=192))
