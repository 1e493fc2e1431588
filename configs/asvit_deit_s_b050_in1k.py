# AS-DeiT-S at the paper's 50% budget: asvit_deit_s_in1k.py with the budget
# loss pulling the mean FLOPs towards half of the dense model's (t = 0.5),
# the setting where the paper compares sample-adaptive pruning with fixed
# pruning rates on DeiT-S. Thresholds, losses and schedule are unchanged.
_base_ = './asvit_deit_s_in1k.py'

model = dict(budget=0.5)
