# SaiT-S/V0.5† ImageNet-1k: the paper's dagger marks the models trained
# with distillation, so this is SaiT-S/V0.5 (value selector, density 0.5,
# K = round(0.5 * (N + 1)) tokens kept after layer 3) with the TIS
# distillation of sait_deit_s_m07_in1k.py: the student's TIS pulled towards
# the last-layer class attention of the head-less DINO ViT-S/16 teacher
# (beta = 4, no logit distillation). It is the model of the paper's
# ablations (alternate training with DINO, the distillation ratio, TIS
# against CLS selection). Test at another density with
# --cfg-options model.test_cfg.density=0.7 (1.0: the dense DeiT-S exactly).
_base_ = './sait_deit_s_m07_in1k.py'

model = dict(
    backbone=dict(selector='value', density=0.5),
    test_cfg=dict(_delete_=True, density=0.5))
