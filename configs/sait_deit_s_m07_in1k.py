# SaiT-S/M0.7† ImageNet-1k: DeiT-S trained from scratch with the DeiT-S
# schedule (300 epochs, AdamW, cosine, 5 warm-up epochs, drop path 0.1,
# Mixup/CutMix, label smoothing), plus SaiT's token pruning: after layer 3
# (0-based: selection before layer 3) the patch tokens are scored by TIS
# (attention column sums) and the fewest reaching 70% of the TIS mass are
# kept. Training masks pruned keys with -1e4 logits; later layers alternate
# dense (even) and sparse (odd) epochs.
# The dagger is the TIS distillation: the student's TIS is pulled (KL,
# beta = 4) towards the last-layer class attention of DINO ViT-S/16, the
# paper's teacher (its Table 5: DINO beats a supervised DeiT-S teacher).
# DINO is self-supervised and has no classifier, so the teacher is built
# head-less and there is no logit distillation (distill_weight=0; a
# positive one is refused at build time). The DINO checkpoint (timm layout)
# is converted on loading. sait_deit_s_m07_deit_teacher_in1k.py uses a
# supervised DeiT-S teacher instead; model.teacher=None
# model.tis_distill_weight=0 gives plain SaiT-S/M0.7.
# At test time the mass threshold (or, with selector='value', the density)
# changes on the fly: --cfg-options model.test_cfg.mass_threshold=0.9;
# mass_threshold=1.0 is the dense DeiT-S exactly.
_base_ = 'mmpretrain::deit/deit-small_4xb256_in1k.py'

custom_imports = dict(imports=['mmvitaccel'], allow_failed_imports=False)

# DINO ViT-S/16 backbone weights (facebookresearch/dino)
dino_vit_s16 = ('https://dl.fbaipublicfiles.com/dino/'
                'dino_deitsmall16_pretrain/dino_deitsmall16_pretrain.pth')

model = dict(
    type='mmvitaccel.TokenPrunedClassifier',
    backbone=dict(
        _delete_=True,
        type='mmvitaccel.TokenPrunedVisionTransformer',
        arch='deit-small',
        img_size=224,
        patch_size=16,
        prune_before=(3, ),
        scorer='tis',
        selector='mass',
        mass_threshold=0.7,
        density=0.5,
        mask_mode='logits',
        batch_mode='pad',
        drop_path_rate=0.1),
    teacher=dict(
        config=dict(
            type='ImageClassifier',
            backbone=dict(
                type='VisionTransformer',
                arch='deit-small',
                img_size=224,
                patch_size=16),
            head=None),
        init_cfg=dict(type='Pretrained', checkpoint=dino_vit_s16)),
    distill_weight=0.,
    tis_distill_weight=4.,
    test_cfg=dict(mass_threshold=0.7))

# DeiT-S's schedule: 5 linear warm-up epochs from lr * 1e-3, then cosine
# to 1e-5 (mmpretrain's DeiT recipe warms up for 20)
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-3,
        by_epoch=True,
        end=5,
        convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=5)
]

custom_hooks = [dict(type='mmvitaccel.DenseSparseAlternateHook', period=2)]
