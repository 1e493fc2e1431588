# STViT on Video Swin-T, Kinetics-400: the upstream mmaction2 recipe
# unchanged (32x2x1 clips, 30 epochs, AdamW lr 1e-3, cosine, AMP, ImageNet
# Swin-T inflated as initialisation), with semantic tokens generated from
# each frame in stage 3 (STGM at blocks 3-4, 1-based; 9 tokens per 7x7
# window, w_k 10 and 14 inside each frame's map as in classification, STGM-2
# keys Concat(S1, X), max pooling). I3DHead pools the semantic grid.
_base_ = './_base_/swin_t_k400.py'

model = dict(
    backbone=dict(
        type='mmvitaccel.STViTSwinTransformer3D',
        semantic_window=3,
        key_windows=(10, 14),
        key_region='inside',
        stgm2_keys='semantic_and_image',
        pooling='max',
        move_stgm=False))
