# SaiT-S/M0.7† ImageNet-1k: DeiT-S trained from scratch with the upstream
# DeiT-S recipe (300 epochs, AdamW, cosine, Mixup/CutMix, label smoothing),
# plus SaiT's token pruning: after layer 3 (0-based: selection before layer
# 3) the patch tokens are scored by TIS (attention column sums) and the fewest
# reaching 70% of the TIS mass are kept. Training masks pruned keys with
# -1e4 logits; later layers alternate dense (even) and sparse (odd) epochs.
# Train-time distillation option (the dagger): the TIS is distilled from a
# pretrained teacher's last-layer class attention with weight beta = 4; set
# model.tis_distill_weight=0 and model.teacher=None for plain SaiT-S/M0.7.
# At test time the mass threshold (or, with selector='value', the density)
# changes on the fly: --cfg-options model.test_cfg.mass_threshold=0.9;
# mass_threshold=1.0 is the dense DeiT-S exactly.
_base_ = 'mmpretrain::deit/deit-small_4xb256_in1k.py'

custom_imports = dict(imports=['mmvitaccel'], allow_failed_imports=False)

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
        batch_mode='pad'),
    teacher=dict(
        config='mmpretrain::deit/deit-small_4xb256_in1k.py',
        init_cfg=dict(
            type='Pretrained',
            checkpoint='https://download.openmmlab.com/mmclassification/v0/'
            'deit/deit-small_pt-4xb256_in1k_20220218-9425b9bb.pth')),
    distill_weight=0.,
    tis_distill_weight=4.,
    test_cfg=dict(mass_threshold=0.7))

custom_hooks = [dict(type='mmvitaccel.DenseSparseAlternateHook', period=2)]
