# Swin-T from hvit_swin_t_in1k.py in deploy form
# (cFFN folded), cFFN only.
# Used by the speed measurements in docs/hmhsa_cffn.md.
_base_ = '../hvit_swin_t_in1k.py'

model = dict(backbone=dict(deploy=True, hmhsa=False, cffn=True))
