# Video Swin-T on Kinetics-400, the upstream mmaction2 recipe unchanged
# (32x2x1 clips, 30 epochs, AdamW lr 1e-3, cosine, AMP).
_base_ = 'mmaction::recognition/swin/swin-tiny-p244-w877_in1k-pre_8xb8-amp-32x2x1-30e_kinetics400-rgb.py'  # noqa

custom_imports = dict(imports=['mmvitaccel'], allow_failed_imports=False)
