# DGSSA-Swin-T ImageNet-1k: static window attention (one 7x7-window matrix
# per head and block, shared by all windows, relative position bias folded
# in, shift masks kept) in P = 6 blocks, the rest upstream Swin-T. The paper
# leaves the 0th layer dynamic (sum_{l=1}^{P} gamma_l = P), so the static
# blocks are 1-6 over all stages (stage 1 block 1, stage 2, stage 3 blocks
# 0-2); static_start=0 gives blocks 0-5 instead.
# Recipe: the upstream Swin-T recipe (AdamW lr 1e-3 at batch 1024, wd 0.05,
# cosine, 300 epochs, drop path 0.2) with the paper's 5 warm-up epochs.
# Write the dynamic-guided init first:
#   python tools/dgssa_init.py configs/dgssa_swin_t_in1k.py \
#       --checkpoint <swin-t.pth> --out work_dirs/dgssa_init/swin-tiny_dgssa.pth
_base_ = 'mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py'

custom_imports = dict(imports=['mmvitaccel'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmvitaccel.DGSSASwinTransformer',
        arch='tiny',
        static_blocks=6,
        static_start=1,
        static_init='dg',
        drop_path_rate=0.2,
        out_indices=(3, ),
        init_cfg=dict(
            type='Pretrained',
            checkpoint='work_dirs/dgssa_init/swin-tiny_dgssa.pth')))

optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={'.static_logits': dict(decay_mult=0.0)}))
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-3,
        by_epoch=True,
        end=5,
        convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=5)
]
