# AS-ViT on the digits host (docs/study.md): the paper's placement unchanged
# (adaptive pruning before layers 4, 7 and 10, 0-based), head-importance
# weighted class attention scored against learnable thresholds, the budget
# loss at the paper's 0.65 FLOPs setting (lambda1 = 2) and the logit KL
# from the dense host as the frozen teacher (lambda2 = 0.5).
# The thresholds scale with the token count: a patch's mean score is
# 1 / N, so the paper's initial thresholds for N = 196 (0.001, 0.002,
# 0.003) become 0.003, 0.006, 0.009 for the host's N = 64, and tau with
# them (1e-4 -> 3e-4). The realised FLOPs ratio against the budget is
# reported by the study (the pruned-token counts of a trained model).
# Start from the host and give it as the teacher:
#   --cfg-options load_from=HOST.pth model.teacher.checkpoint=HOST.pth
_base_ = ['./_base_/host_finetune.py']

model = dict(
    type='mmvitaccel.TokenPrunedClassifier',
    backbone=dict(
        type='mmvitaccel.TokenPrunedVisionTransformer',
        prune_before=(4, 7, 10),
        scorer='asvit',
        selector='threshold',
        thresholds=(0.003, 0.006, 0.009),
        tau=3e-4,
        mask_mode='policy',
        # the bounded gradient of the policy softmax (the default; the
        # paper's 'tangent' one exploded on this host, docs/study.md)
        policy_grad='secant',
        batch_mode='pad',
        out_type='cls_token'),
    teacher=dict(config='{{ fileDirname }}/digits_deit_host.py',
                 checkpoint=None),
    distill_weight=0.5,
    token_distill_weight=0.,
    budget=0.65,
    budget_weight=2.,
    test_cfg=dict(batch_mode='pad'))

# the thresholds get no weight decay
optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={'.thresholds': dict(decay_mult=0.0)}))
