# SaiT-S/M0.7† with the supervised DeiT-S (mmpretrain weights) as the TIS
# distillation teacher instead of DINO ViT-S/16: the other teacher of the
# paper's teacher comparison (its Table 5, where DINO is the better one).
# Everything else is sait_deit_s_m07_in1k.py; the logits are still not
# distilled (distill_weight=0), as in SaiT's objective.
_base_ = './sait_deit_s_m07_in1k.py'

model = dict(
    teacher=dict(
        _delete_=True,
        config='mmpretrain::deit/deit-small_4xb256_in1k.py',
        init_cfg=dict(
            type='Pretrained',
            checkpoint='https://download.openmmlab.com/mmclassification/v0/'
            'deit/deit-small_pt-4xb256_in1k_20220218-9425b9bb.pth')))
