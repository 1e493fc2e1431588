# The pruned DeiT in the dense evidence's segmentor (docs/study.md, "Dense
# prediction"): deit_upernet.py with the classification study's SaiT
# setting (configs/study/sait_digits.py): before layer 3 (0-based), layer
# 2's TIS scores the patch tokens and the fewest that reach 70% of the TIS
# mass are kept, masked logits in training and dropped tokens in testing,
# as configs/pruned_deit_s_upernet_ade20k.py. TokenRestoreNeck puts each
# pruned position back with its features from layer 2.
_base_ = './deit_upernet.py'

model = dict(backbone=dict(mass_threshold=0.7))
