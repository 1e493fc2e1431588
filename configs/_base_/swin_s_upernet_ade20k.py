# Swin-S UperNet on ADE20K, the upstream mmseg recipe unchanged
# (512x512 crops, 160k iterations, AdamW lr 6e-5, poly schedule).
_base_ = 'mmseg::swin/swin-small-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'  # noqa

custom_imports = dict(imports=['mmvitaccel'], allow_failed_imports=False)
