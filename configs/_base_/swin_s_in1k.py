# Swin-S ImageNet-1k classification, the upstream mmpretrain recipe unchanged
# (300 epochs, AdamW lr 1e-3 at batch 1024, cosine, 20 warm-up epochs).
_base_ = 'mmpretrain::swin_transformer/swin-small_16xb64_in1k.py'

custom_imports = dict(imports=['mmvitaccel'], allow_failed_imports=False)
