# PVTv2-b1 from hvit_pvtv2_b1_tinyimagenet.py in deploy form
# (cFFN folded), hMHSA and cFFN.
# Used by the speed measurements in docs/hmhsa_cffn.md.
_base_ = '../hvit_pvtv2_b1_tinyimagenet.py'

model = dict(backbone=dict(deploy=True, hmhsa=True, cffn=True))
