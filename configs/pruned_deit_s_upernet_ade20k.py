# Token-pruned DeiT-S + UperNet on ADE20K: mmseg's DeiT-S UperNet recipe
# (512x512 crops, 160k iterations, AdamW lr 6e-5, poly schedule, outputs of
# layers 2, 5, 8, 11) with mmpretrain's DeiT-S as a SaiT-style pruned
# backbone: TIS of layer 3, the fewest tokens reaching 70% of the TIS mass
# kept from layer 3 on (masked while training, dropped at test time). The
# TokenRestoreNeck puts every kept token back on the 32x32 patch grid, fills
# pruned positions with their features from the layer where they were
# dropped and builds the 4x/2x/1x/0.5x pyramid for UperNet.
# Test at another mass threshold (1.0: the dense backbone) with
# --cfg-options model.backbone.mass_threshold=0.9
_base_ = 'mmseg::vit/vit_deit-s16_mln_upernet_8xb2-160k_ade20k-512x512.py'

custom_imports = dict(imports=['mmvitaccel'], allow_failed_imports=False)

norm_cfg = dict(type='SyncBN', requires_grad=True)
model = dict(
    pretrained=None,
    backbone=dict(
        _delete_=True,
        type='mmvitaccel.TokenPrunedVisionTransformer',
        arch='deit-small',
        img_size=512,
        patch_size=16,
        drop_path_rate=0.1,
        interpolate_mode='bicubic',
        out_indices=(2, 5, 8, 11),
        final_norm=False,
        out_type='tokens',
        prune_before=(3, ),
        scorer='tis',
        selector='mass',
        mass_threshold=0.7,
        mask_mode='logits',
        init_cfg=dict(
            type='Pretrained',
            prefix='backbone.',
            checkpoint='https://download.openmmlab.com/mmclassification/v0/'
            'deit/deit-small_pt-4xb256_in1k_20220218-9425b9bb.pth')),
    neck=dict(
        _delete_=True,
        type='mmvitaccel.TokenRestoreNeck',
        embed_dims=384,
        rescales=(4, 2, 1, 0.5),
        norm_cfg=norm_cfg))
