# DGSSA-Swin-S ImageNet-1k: dgssa_swin_t_in1k.py on Swin-S, DGSSA in
# P = 12 blocks, blocks 1-12 (block 0 stays dynamic), drop path 0.3 as the
# upstream Swin-S recipe.
_base_ = './dgssa_swin_t_in1k.py'

model = dict(
    backbone=dict(
        arch='small',
        static_blocks=12,
        drop_path_rate=0.3,
        init_cfg=dict(
            checkpoint='work_dirs/dgssa_init/swin-small_dgssa.pth')))
