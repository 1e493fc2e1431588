# STViT-DeiT-S ImageNet-1k classification (paper: 16 semantic tokens, -58%
# FLOPs, no accuracy drop), trained with the upstream DeiT-S recipe (300
# epochs, AdamW, cosine, Mixup/CutMix, label smoothing). The STGM is layers
# 5-6 of 12 (0-based 4, 5); the cls token is dropped there and the head sees
# the global average of the semantic tokens, (B, 384), which mmpretrain's
# VisionTransformerClsHead takes as it is.
# Drop path 0.1 is the official DeiT recipe's value; mmpretrain's DeiT-T/S
# configs leave it out (0.0), its DeiT-B config keeps 0.1.
_base_ = 'mmpretrain::deit/deit-small_4xb256_in1k.py'

custom_imports = dict(imports=['mmvitaccel'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmvitaccel.STViTDeiT',
        arch='deit-small',
        img_size=224,
        patch_size=16,
        drop_path_rate=0.1,
        stgm_layers=(4, 5),
        semantic_tokens=16,
        pooling='intra_inter',
        global_centres=True,
        out_type='avg_featmap'),
    head=dict(in_channels=384))

# the global centres are learnable tokens: no weight decay, like the cls
# token and the position embedding in the upstream recipe
optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={'.global_centres': dict(decay_mult=0.0)}))
