# DGSSA-Swin in the dense evidence's segmentor (docs/study.md, "Dense
# prediction"): static window attention in half of the host's blocks, as
# the paper's Swin settings (6 of Swin-T's 12, 12 of Swin-S's 24): 9 of the
# digits host's 18, blocks 1-9 over all stages (the backbone's default
# static_start=1 keeps block 0 dynamic), as configs/dgssa_swin_s_coco.py.
# The static logits start from the host's mean attention over training
# scenes (static_init='dg', the default): tools/analysis/dense_study.py
# writes them to the path below with tools/dgssa_init.py (once for both
# tasks: their training scenes are the same).
_base_ = './swin_upernet.py'

model = dict(
    backbone=dict(
        type='mmvitaccel.DGSSASwinTransformer',
        static_blocks=9,
        init_cfg=dict(
            checkpoint='work_dirs/dense_study/digits_swin_host_dgssa.pth')))
optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={'static_logits': dict(decay_mult=0.)}))
