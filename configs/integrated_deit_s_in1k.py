# Integrated-DeiT-S ImageNet-1k (paper table 2): DGSSA (static attention) in
# layers 1-2 (0-based; layer 0 stays dynamic), GLAD at layers 3, 5, 7 taking
# 197 -> 127 -> 77 -> 35 tokens (class token included and never aggregated),
# FLOPs ratio eta 0.46 by the paper's formulas (paper: "around 0.5"), with
# GLAD token distillation from the frozen pretrained DeiT-S and, as in the
# paper, a cross-entropy between its predictions and the student's.
# Recipe: the upstream DeiT-S recipe (AdamW, wd 0.05, cosine to 1e-5, 300
# epochs, Mixup/CutMix, label smoothing) with the paper's settings: "a batch
# size of 4096 for the GLAD-based and integrated pipeline compression" on 8
# GPUs (8 x 512), lr 1e-3 at that batch (auto_scale_lr base 4096), 5 warm-up
# epochs from lr 1e-6 (upstream: 20) and drop path 0.1 ("the same data
# augmentation and regularization settings as Deit"; DeiT's drop path).
# Before training, write the dynamic-guided init (static logits = log of the
# mean attention of the pretrained DeiT-S over training images):
#   python tools/dgssa_init.py configs/integrated_deit_s_in1k.py \
#       --checkpoint <deit-s.pth> --out work_dirs/dgssa_init/deit-small_dgssa.pth
# or set static_init='uniform'/'local'/'random' and point init_cfg at the DeiT
# checkpoint itself.
_base_ = 'mmpretrain::deit/deit-small_4xb256_in1k.py'

custom_imports = dict(imports=['mmvitaccel'], allow_failed_imports=False)

deit_checkpoint = 'https://download.openmmlab.com/mmclassification/v0/deit/deit-small_pt-4xb256_in1k_20220218-9425b9bb.pth'  # noqa
model = dict(
    type='mmvitaccel.GLADDistillClassifier',
    backbone=dict(
        _delete_=True,
        type='mmvitaccel.DGSSAVisionTransformer',
        arch='deit-small',
        img_size=224,
        patch_size=16,
        drop_path_rate=0.1,
        static_layers=(1, 2),
        static_init='dg',
        glad_layers=(3, 5, 7),
        glad_tokens=(127, 77, 35),
        init_cfg=dict(
            type='Pretrained',
            checkpoint='work_dirs/dgssa_init/deit-small_dgssa.pth')),
    teacher=dict(
        type='mmpretrain.VisionTransformer',
        arch='deit-small',
        img_size=224,
        patch_size=16,
        init_cfg=dict(
            type='Pretrained', checkpoint=deit_checkpoint,
            prefix='backbone.')),
    teacher_head=dict(
        type='mmpretrain.VisionTransformerClsHead',
        num_classes=1000,
        in_channels=384,
        init_cfg=dict(
            type='Pretrained', checkpoint=deit_checkpoint, prefix='head.')),
    distill_weight=1.0,
    kd_weight=1.0,
    head=dict(in_channels=384))

# the paper's batch: 8 GPUs x 512 = 4096, lr 1e-3 at 4096
train_dataloader = dict(batch_size=512)
optim_wrapper = dict(optimizer=dict(lr=1e-3))
auto_scale_lr = dict(base_batch_size=4096)

# the static logits are like the position embeddings of the upstream recipe
# (which also cover the GLADs' '.pos_embed'): no weight decay
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
