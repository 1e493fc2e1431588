# STViT-R in the dense evidence's segmentor (docs/study.md, "Dense
# prediction"): the digits Swin host's stage 3 (12 blocks) as two dumbbell
# units, with the paper's dense settings (configs/stvit_r_swin_s_coco.py and
# configs/stvit_r_swin_s_upernet_ade20k.py: w_s = 3, key windows 14 and 21
# centred on each window, recovery neighbourhood 27, max-pooled centres,
# STGM-2 keys Concat(S1, X)). The host is a plain Swin, so the paper's Swin
# stem (4x4 patches) and no layer scale; every block of a unit starts from
# the host's block at its place, as STViT-R starts from a Swin ImageNet
# checkpoint (docs/stvit.md).
_base_ = './swin_upernet.py'

model = dict(
    backbone=dict(
        type='mmvitaccel.STViTRSwinTransformer',
        semantic_window=3,
        key_windows=(14, 21),
        key_region='centred',
        stgm2_keys='semantic_and_image',
        recovery_window=27,
        pooling='max',
        stem='patch',
        layer_scale=None))
