# STViT-Swin-T ImageNet-1k classification, trained from scratch with the
# upstream Swin-T recipe (300 epochs, AdamW lr 1e-3 at batch 1024, cosine,
# Mixup/CutMix, drop path 0.2), as in the paper. STGM at stage-3 blocks 3-4
# (1-based; set move_stgm=True for the paper's "move STGM" variant), 9
# semantic tokens per window, w_k 10 and 14 with the regions placed inside
# the map as the authors' classification code unfolds them (at 224 px STGM-1
# sees 10x10 keys per window, STGM-2 the whole 14x14 map), STGM-2 keys
# Concat(S1, X) (the paper's Eq. 3), adaptive max pooling. The backbone
# averages the semantic tokens itself (the paper's head), so the
# upstream GAP neck goes.
_base_ = 'mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py'

custom_imports = dict(imports=['mmvitaccel'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmvitaccel.STViTSwinTransformer',
        arch='tiny',
        drop_path_rate=0.2,
        out_indices=(3, ),
        semantic_window=3,
        key_windows=(10, 14),
        key_region='inside',
        stgm2_keys='semantic_and_image',
        pooling='max',
        move_stgm=False,
        out_type='avg'),
    neck=None)
