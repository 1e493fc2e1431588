# hMHSA + cFFN on DeiT-S, ImageNet-1k, with the upstream DeiT-S recipe (300
# epochs, AdamW, cosine, Mixup/CutMix, label smoothing) and drop path 0.1
# (the official DeiT value). All 12 layers: hMHSA (6 heads -> 3 real + 3
# hallucinated maps; IHH on the 14x14 key grid, the class-token key seen by
# the centre tap only) and cFFN (t = 0.5, r = 2: k = 0.5 * 4 * 384 / 5 = 154).
# Switches: model.backbone.hmhsa / cffn (True, False or layer indices),
# model.backbone.deploy=True for the folded form of tools/reparameterize.py.
_base_ = [
    'mmpretrain::deit/deit-small_4xb256_in1k.py',
    './_base_/schedules/min_lr_tail_300e.py'
]

custom_imports = dict(imports=['mmvitaccel'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmvitaccel.HViTDeiT',
        arch='deit-small',
        img_size=224,
        patch_size=16,
        drop_path_rate=0.1,
        hmhsa=True,
        cffn=True,
        cffn_ratio=0.5,
        cffn_branches=2,
        deploy=False),
    head=dict(in_channels=384))

# The paper's evaluation protocol (10 extra epochs at the minimum LR, top-1
# averaged over them): _base_/schedules/min_lr_tail_300e.py.
param_scheduler = {{_base_.min_lr_300e_scheduler}}
train_cfg = {{_base_.min_lr_300e_train_cfg}}
custom_hooks = {{_base_.min_lr_300e_hooks}}
