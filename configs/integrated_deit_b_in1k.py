# Integrated-DeiT-B ImageNet-1k: integrated_deit_s_in1k.py on DeiT-B (the
# DeiT-S layout: DGSSA 1-2, GLAD at 3, 5, 7 to 127/77/35 tokens, eta 0.46,
# "about 0.5" as in the paper), with integrated_deit_s_in1k.py's schedule:
# the paper's batch 4096 (8 GPUs x 512), lr 1e-3 at that batch, 5 warm-up
# epochs, cosine, 300 epochs, drop path 0.1.
_base_ = './integrated_deit_s_in1k.py'

deit_checkpoint = 'https://download.openmmlab.com/mmclassification/v0/deit/deit-base_pt-16xb64_in1k_20220216-db63c16c.pth'  # noqa
model = dict(
    backbone=dict(
        arch='deit-base',
        init_cfg=dict(
            checkpoint='work_dirs/dgssa_init/deit-base_dgssa.pth')),
    teacher=dict(
        arch='deit-base', init_cfg=dict(checkpoint=deit_checkpoint)),
    teacher_head=dict(
        in_channels=768, init_cfg=dict(checkpoint=deit_checkpoint)),
    head=dict(in_channels=768))
