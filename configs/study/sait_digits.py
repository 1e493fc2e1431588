# SaiT on the digits host (docs/study.md): the paper's placement unchanged
# (token selection before layer 3, 0-based, from layer 2's TIS), the mass
# selector keeping the fewest patch tokens that reach 70% of the TIS mass
# (SaiT-S/M0.7), masked logits in training, dense and sparse epochs
# alternating (DenseSparseAlternateHook), and the TIS distillation (KL,
# beta = 4) towards the last-layer class attention of the trained host, the
# frozen teacher (the paper's dagger; no logit distillation, as in the
# paper). The mass selector adapts to the image, so it needs no rescaling
# from 196 to 64 patches. The same trained model tests with the value
# selector at density 0.5 (SaiT-S/V0.5):
#   --cfg-options model.test_cfg.selector=value model.test_cfg.density=0.5
# The student starts from the host (load_from; the backbone keeps the
# upstream names, so every key loads and nothing is new). Give the host
# checkpoint to both:
#   --cfg-options load_from=HOST.pth model.teacher.checkpoint=HOST.pth
_base_ = ['./_base_/host_finetune.py']

model = dict(
    type='mmvitaccel.TokenPrunedClassifier',
    backbone=dict(
        type='mmvitaccel.TokenPrunedVisionTransformer',
        prune_before=(3, ),
        scorer='tis',
        selector='mass',
        mass_threshold=0.7,
        density=0.5,
        mask_mode='logits',
        batch_mode='pad',
        out_type='cls_token'),
    teacher=dict(config='{{ fileDirname }}/digits_deit_host.py',
                 checkpoint=None),
    distill_weight=0.,
    tis_distill_weight=4.,
    test_cfg=dict(mass_threshold=0.7))

custom_hooks = [
    dict(type='mmvitaccel.StepSeedHook'),
    dict(type='mmvitaccel.DenseSparseAlternateHook', period=2)
]
