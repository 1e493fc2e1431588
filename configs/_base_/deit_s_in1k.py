# DeiT-S ImageNet-1k classification, the upstream mmpretrain recipe unchanged
# (300 epochs, AdamW, cosine, Mixup/CutMix, label smoothing).
_base_ = 'mmpretrain::deit/deit-small_4xb256_in1k.py'

custom_imports = dict(imports=['mmvitaccel'], allow_failed_imports=False)
