# AS-DeiT-S with a fixed keep ratio of 0.65 per stage: asvit_deit_s_in1k.py
# with its learnable thresholds replaced by the value selector (keep 0.65 of
# the alive tokens before layers 4, 7 and 10), and without the teacher, the
# kept-token distillation and the budget loss. Learned thresholds keep as
# many tokens as a trained model's attention makes them keep, so the FLOPs
# and speed measurements on random weights use this fixed layout instead
# (about the paper's 0.65 FLOPs budget). docs/token_pruning.md lists the
# commands.
_base_ = './asvit_deit_s_in1k.py'

model = dict(
    backbone=dict(selector='value', density=0.65),
    teacher=None,
    token_distill_weight=0.,
    budget=None)
