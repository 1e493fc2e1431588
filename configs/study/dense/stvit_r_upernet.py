# STViT-R in the dense evidence's segmentor (docs/study.md, "Dense
# prediction"): the digits Swin host's stage 3 (12 blocks) as two dumbbell
# units. STViTRSwinTransformer's defaults are the paper's dense settings (as
# configs/stvit_r_swin_s_coco.py sets them): w_s = 3, key windows 14 and 21
# centred on each window, recovery neighbourhood 27, max-pooled centres,
# STGM-2 keys Concat(S1, X), and, for a plain Swin host, Swin's 4x4 patch
# stem and no layer scale. Every block of a unit starts from the host's
# block at its place, as STViT-R starts from a Swin ImageNet checkpoint
# (docs/stvit.md).
_base_ = './swin_upernet.py'

model = dict(backbone=dict(type='mmvitaccel.STViTRSwinTransformer'))
