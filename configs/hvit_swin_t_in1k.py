# hMHSA + cFFN on Swin-T, ImageNet-1k, with the upstream Swin-T recipe (300
# epochs, AdamW lr 1e-3 at batch 1024, cosine, Mixup/CutMix, drop path 0.2).
# hMHSA in stages 2-4 (6/12/24 heads; stage 1 has 3, which cannot be
# halved), IHH on the 7x7 window grid, relative position bias and shift mask
# added to all maps after the hallucination; cFFN (t = 0.5, r = 2) in every
# block. Switches: model.backbone.hmhsa / cffn (True, False or stage
# indices), model.backbone.deploy=True for the folded form.
_base_ = [
    'mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py',
    './_base_/schedules/min_lr_tail_300e.py'
]

custom_imports = dict(imports=['mmvitaccel'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        type='mmvitaccel.HViTSwinTransformer',
        arch='tiny',
        hmhsa=True,
        cffn=True,
        cffn_ratio=0.5,
        cffn_branches=2,
        deploy=False))

# The paper's evaluation protocol (10 extra epochs at the minimum LR, top-1
# averaged over them): _base_/schedules/min_lr_tail_300e.py.
param_scheduler = {{_base_.min_lr_300e_scheduler}}
train_cfg = {{_base_.min_lr_300e_train_cfg}}
custom_hooks = {{_base_.min_lr_300e_hooks}}
