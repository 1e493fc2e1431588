# ToMe (Bolya et al., ICLR 2023) on DeiT-S ImageNet-1k, training-free: the
# upstream mmpretrain DeiT-S recipe and weights, r = 13 tokens merged in every
# layer (the paper's DeiT-S setting) with proportional attention.
#   python tools/test.py configs/tome_deit_s_in1k.py DEIT_S.pth
# Another r: --cfg-options model.backbone.r=16 (or "(16, 0.5)", a schedule);
# a FLOPs target: model.backbone.r=None model.backbone.flops_ratio=0.6.
# To fine-tune, the authors train without proportional attention:
# model.backbone.prop_attn=False.
_base_ = './_base_/deit_s_in1k.py'

model = dict(
    backbone=dict(
        type='mmvitaccel.ToMeVisionTransformer', r=13, prop_attn=True))
load_from = ('https://download.openmmlab.com/mmclassification/v0/deit/'
             'deit-small_pt-4xb256_in1k_20220218-9425b9bb.pth')
