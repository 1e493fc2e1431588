# SaiT-S/V0.5 ImageNet-1k: sait_deit_s_m07_in1k.py with the value selector,
# keeping K = round(0.5 * (N + 1)) tokens (class token included) in training,
# and without distillation (sait_deit_s_v05_dino_in1k.py is SaiT-S/V0.5†,
# with it). Test at another density with
# --cfg-options model.test_cfg.density=0.7 (1.0: the dense DeiT-S exactly).
_base_ = './sait_deit_s_m07_in1k.py'

model = dict(
    backbone=dict(selector='value', density=0.5),
    teacher=None,
    tis_distill_weight=0.,
    test_cfg=dict(_delete_=True, density=0.5))
