# AS-DeiT-S at a fixed keep ratio of 0.44 per stage: asvit_deit_s_r065_in1k.py
# keeping 0.44 of the alive tokens before layers 4, 7 and 10, which costs
# about half of the dense layers' FLOPs. It stands in for
# asvit_deit_s_b050_in1k.py (the 50% budget, learned thresholds) in the FLOPs
# measurements on random weights; docs/token_pruning.md lists the commands.
_base_ = './asvit_deit_s_r065_in1k.py'

model = dict(backbone=dict(density=0.44))
