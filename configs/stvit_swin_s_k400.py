# STViT on Video Swin-S, Kinetics-400: the upstream mmaction2 Swin-S recipe
# unchanged, with per-frame semantic tokens in stage 3 (STGM at blocks 11-12,
# 1-based), as stvit_swin_t_k400.py.
_base_ = 'mmaction::recognition/swin/swin-small-p244-w877_in1k-pre_8xb8-amp-32x2x1-30e_kinetics400-rgb.py'  # noqa

custom_imports = dict(imports=['mmvitaccel'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        type='mmvitaccel.STViTSwinTransformer3D',
        semantic_window=3,
        key_windows=(10, 14),
        key_region='inside',
        stgm2_keys='semantic_and_image',
        pooling='max',
        move_stgm=False))
