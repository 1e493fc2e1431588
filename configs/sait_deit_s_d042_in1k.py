# SaiT-S at a fixed density of 0.42: sait_deit_s_v05_in1k.py with the value
# selector keeping 0.42 of the tokens (82 of 196 patches) after layer 3, in
# training and in prediction. With random weights the mass selector of
# SaiT-S/M0.7 keeps an arbitrary count, so this config stands in for it in
# the FLOPs and speed measurements (0.42 is the paper's mean density of
# SaiT-S/M0.7). docs/token_pruning.md lists the commands.
_base_ = './sait_deit_s_v05_in1k.py'

model = dict(backbone=dict(density=0.42), test_cfg=dict(density=0.42))
