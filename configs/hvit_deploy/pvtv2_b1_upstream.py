# PVTv2-b1 from hvit_pvtv2_b1_tinyimagenet.py in deploy form
# (cFFN folded), neither: the upstream host.
# Used by the speed measurements in docs/hmhsa_cffn.md.
# mmpretrain has no PVTv2 config, so this is the speed baseline
# of the PVTv2-b1 variants (parity with upstream PVTv2 is tested).
_base_ = '../hvit_pvtv2_b1_tinyimagenet.py'

model = dict(backbone=dict(deploy=True, hmhsa=False, cffn=False))
