# AS-DeiT-T ImageNet-1k: asvit_deit_s_in1k.py on DeiT-T (fine-tuned from the
# mmpretrain DeiT-T weights, distilled from the dense DeiT-T).
_base_ = './asvit_deit_s_in1k.py'

deit_t = ('https://download.openmmlab.com/mmclassification/v0/deit/'
          'deit-tiny_pt-4xb256_in1k_20220218-13b382a0.pth')

model = dict(
    backbone=dict(arch='deit-tiny'),
    head=dict(in_channels=192),
    teacher=dict(
        config='mmpretrain::deit/deit-tiny_4xb256_in1k.py',
        init_cfg=dict(checkpoint=deit_t)))
load_from = deit_t
