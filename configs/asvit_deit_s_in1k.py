# AS-DeiT-S ImageNet-1k: fine-tune a pretrained DeiT-S (mmpretrain weights)
# for 30 epochs at lr 2e-5 with AS-ViT's adaptive token pruning: before
# layers 4, 7 and 10 (0-based) the patch tokens are scored by head-importance
# weighted class attention of the previous layer and kept when the score
# exceeds a learnable threshold (init 0.001, 0.002, 0.003; a straight-through
# sigmoid with tau = 1e-4 in training, the policy softmax keeping the
# diagonal). Losses: label-smoothed CE, budget-aware loss (target 0.65 of
# the dense FLOPs, lambda1 = 2), KL distillation from the dense DeiT-S on the
# logits (lambda2 = 0.5). The paper aligns the tokens too only for models
# "like LV-ViT ... with an additional linear layer to integrate all image
# tokens"; DeiT classifies from the class token alone, so the kept-token KL
# is off (model.token_distill_weight=0.5 turns it on).
# Batched inference pads and masks (exact); model.test_cfg.batch_mode='mean'
# is the authors' batch-mean count (faster, slightly different).
_base_ = 'mmpretrain::deit/deit-small_4xb256_in1k.py'

custom_imports = dict(imports=['mmvitaccel'], allow_failed_imports=False)

deit_s = ('https://download.openmmlab.com/mmclassification/v0/deit/'
          'deit-small_pt-4xb256_in1k_20220218-9425b9bb.pth')

model = dict(
    type='mmvitaccel.TokenPrunedClassifier',
    backbone=dict(
        _delete_=True,
        type='mmvitaccel.TokenPrunedVisionTransformer',
        arch='deit-small',
        img_size=224,
        patch_size=16,
        prune_before=(4, 7, 10),
        scorer='asvit',
        selector='threshold',
        thresholds=(0.001, 0.002, 0.003),
        tau=1e-4,
        mask_mode='policy',
        batch_mode='pad'),
    teacher=dict(
        config='mmpretrain::deit/deit-small_4xb256_in1k.py',
        init_cfg=dict(type='Pretrained', checkpoint=deit_s)),
    distill_weight=0.5,
    token_distill_weight=0.,
    budget=0.65,
    budget_weight=2.,
    test_cfg=dict(batch_mode='pad'))

# the whole classifier (head included) starts from DeiT-S; the thresholds
# are new
load_from = deit_s

# 30 epochs at lr 2e-5 (AdamW, cosine); the thresholds get no weight decay
# and the model's learning rate: the paper gives them no lr of their own
# ("most of the training settings stay the same as the originals"), and a
# short --tiny run showed that they move at lr 2e-5 (docs/token_pruning.md).
# A threshold multiplier is an option: add lr_mult to the custom key.
optim_wrapper = dict(
    optimizer=dict(lr=2e-5),
    paramwise_cfg=dict(custom_keys={'.thresholds': dict(decay_mult=0.0)}))
param_scheduler = [
    dict(type='CosineAnnealingLR', eta_min=1e-6, by_epoch=True, begin=0,
         end=30)
]
train_cfg = dict(max_epochs=30)

# --tiny trains from random weights (downloads are dropped), where every
# patch scores about 1/196: the paper's thresholds (which assume a trained
# DeiT, whose scores spread) would sit far below all scores and, with
# tau = 1e-4, get no gradient. Start them where a random model's scores are,
# with a softer tau, so that a short tiny run moves them toward the budget.
tiny = dict(overrides={
    'model.backbone.thresholds': (0.004, 0.005, 0.006),
    'model.backbone.tau': 2e-3
})
