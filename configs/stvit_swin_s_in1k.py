# STViT-Swin-S ImageNet-1k classification: stvit_swin_t_in1k.py with Swin-S
# (STGM at stage-3 blocks 11-12, 1-based) and the upstream Swin-S recipe,
# whose only other difference is drop path 0.3.
_base_ = './stvit_swin_t_in1k.py'

model = dict(backbone=dict(arch='small', drop_path_rate=0.3))
