# DGSSA-Swin-S UperNet on ADE20K: the mmseg Swin-S recipe (512x512 crops,
# AdamW lr 6e-5, poly schedule, 160k iterations) with static window
# attention in blocks 1-12 (block 0 dynamic). Starts from a DGSSA-Swin-S checkpoint
# (see dgssa_swin_s_coco.py).
_base_ = './_base_/swin_s_upernet_ade20k.py'

model = dict(
    backbone=dict(
        type='mmvitaccel.DGSSASwinTransformer',
        static_blocks=12,
        static_start=1,
        static_init='dg',
        init_cfg=dict(
            type='Pretrained',
            checkpoint='work_dirs/dgssa_init/swin-small_dgssa.pth')))
