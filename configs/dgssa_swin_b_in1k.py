# DGSSA-Swin-B ImageNet-1k: dgssa_swin_t_in1k.py on Swin-B, DGSSA in
# P = 12 blocks, blocks 1-12 (block 0 stays dynamic), drop path 0.5 and head
# width 1024 as upstream.
_base_ = './dgssa_swin_t_in1k.py'

model = dict(
    backbone=dict(
        arch='base',
        static_blocks=12,
        drop_path_rate=0.5,
        init_cfg=dict(
            checkpoint='work_dirs/dgssa_init/swin-base_dgssa.pth')),
    head=dict(in_channels=1024))
