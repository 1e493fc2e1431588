# AS-DeiT-T with a fixed keep ratio of 0.65 per stage: asvit_deit_t_in1k.py
# changed as asvit_deit_s_r065_in1k.py changes asvit_deit_s_in1k.py (value
# selector at 0.65 before layers 4, 7 and 10; no teacher, no kept-token
# distillation, no budget loss), for FLOPs and speed measurements.
_base_ = './asvit_deit_t_in1k.py'

model = dict(
    backbone=dict(selector='value', density=0.65),
    teacher=None,
    token_distill_weight=0.,
    budget=None)
