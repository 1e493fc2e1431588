# STViT Video Swin in the dense evidence's video recognizer (docs/study.md,
# "Dense prediction"): video_swin.py with STViT's semantic tokens in stage 3
# as configs/stvit_swin_t_k400.py sets them (9 tokens per 7x7 window and
# frame, w_k 10 and 14 inside each frame's map, STGM-2 keys Concat(S1, X),
# max pooling). The STGM sits at blocks 7-8 of the host's 12 (0-based 6):
# between the paper's Swin-T (blocks 3-4 of 6) and Swin-S (11-12 of 18),
# linearly in the stage's depth. Every host block keeps its weights; the
# cross-attention blocks start from the host's blocks at their place, less
# their relative position tables (reported unused when the host loads).
_base_ = './video_swin.py'

model = dict(
    backbone=dict(
        type='mmvitaccel.STViTSwinTransformer3D',
        stgm_index=6,
        semantic_window=3,
        key_windows=(10, 14),
        key_region='inside',
        stgm2_keys='semantic_and_image',
        pooling='max'))
