# STViT-DeiT-B ImageNet-1k classification: stvit_deit_s_in1k.py on DeiT-B,
# with the upstream DeiT-B recipe (batch 16x64, EMA hook).
# Drop path 0.1 as in the official DeiT recipe (see stvit_deit_s_in1k.py).
_base_ = 'mmpretrain::deit/deit-base_16xb64_in1k.py'

custom_imports = dict(imports=['mmvitaccel'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmvitaccel.STViTDeiT',
        arch='deit-base',
        img_size=224,
        patch_size=16,
        drop_path_rate=0.1,
        stgm_layers=(4, 5),
        semantic_tokens=16,
        pooling='intra_inter',
        global_centres=True,
        out_type='avg_featmap'),
    head=dict(in_channels=768))

# the global centres are learnable tokens: no weight decay, like the cls
# token and the position embedding in the upstream recipe
optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={'.global_centres': dict(decay_mult=0.0)}))
