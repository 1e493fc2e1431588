# STViT-Swin-B ImageNet-1k classification: stvit_swin_t_in1k.py with Swin-B
# (STGM at stage-3 blocks 11-12, 1-based) and the upstream Swin-B recipe:
# drop path 0.5, head width 1024.
_base_ = './stvit_swin_t_in1k.py'

model = dict(
    backbone=dict(arch='base', drop_path_rate=0.5),
    head=dict(in_channels=1024))
