# The classification study's DeiT host (configs/study/digits_deit_host.py)
# in the dense evidence's segmentor (docs/study.md, "Dense prediction"): the
# dense reference of the pruned DeiT row (pruned_deit_upernet.py), with the
# recipe of swin_upernet.py (same heads, scenes, schedule and optimizer) and
# the layout of configs/pruned_deit_s_upernet_ade20k.py: the host's ViT as
# TokenPrunedVisionTransformer with nothing pruned (mass_threshold=1.0: the
# upstream layers on every token, bit for bit), the tokens of layers 2, 5,
# 8 and 11, and TokenRestoreNeck's simple pyramid for UperNet.
# What differs from the Swin rows, and why:
#   - input 80 px (the scene resized by half; metrics on the 160 px label
#     maps, as mmseg tests): the host's overlapping 4 px stem gives 40x40 =
#     1,600 tokens at 160 px, and global attention over them costs ~5 GMACs
#     a scene, ten times the Swin backbone; at 80 px the digits (13-27 px)
#     also have the host's training size (13-21 px on its 32 px canvas);
#   - pyramid scales (2, 1, 0.5, 0.25) of the 20x20 grid: 40, 20, 10 and 5
#     tokens a side, the Swin rows' stage sizes, so both heads cost the same.
# The backbone starts from the DeiT host's backbone.* (tools/analysis/
# dense_study.py publishes it at the path below).
_base_ = './swin_upernet.py'

host_checkpoint = 'work_dirs/dense_study/digits_deit_host.pth'
embed_dims = 64
input_size = 80

model = dict(
    data_preprocessor=dict(size=(input_size, input_size)),
    backbone=dict(
        _delete_=True,
        type='mmvitaccel.TokenPrunedVisionTransformer',
        arch=dict(embed_dims=embed_dims, num_layers=12, num_heads=4,
                  feedforward_channels=4 * embed_dims),
        img_size=input_size,
        patch_size=4,
        patch_cfg=dict(kernel_size=8, stride=4, padding=2),
        drop_path_rate=0.1,
        interpolate_mode='bicubic',
        out_indices=(2, 5, 8, 11),
        final_norm=False,
        out_type='tokens',
        prune_before=(3, ),
        scorer='tis',
        selector='mass',
        mass_threshold=1.0,
        mask_mode='logits',
        init_cfg=dict(type='Pretrained', prefix='backbone.',
                      checkpoint=host_checkpoint)),
    neck=dict(type='mmvitaccel.TokenRestoreNeck', embed_dims=embed_dims,
              rescales=(2, 1, 0.5, 0.25),
              norm_cfg=dict(type='SyncBN', requires_grad=True)),
    decode_head=dict(in_channels=[embed_dims] * 4),
    auxiliary_head=dict(in_channels=embed_dims))

# the label map stays at 160 px in testing (KeyMapper hides it from Resize)
resize = dict(type='Resize', scale=(input_size, input_size), keep_ratio=True)
train_dataloader = dict(dataset=dict(
    pipeline=[resize, dict(type='PackSegInputs')]))
val_dataloader = dict(dataset=dict(pipeline=[
    dict(type='KeyMapper', mapping=dict(gt_seg_map=...), auto_remap=False,
         transforms=[resize]),
    dict(type='PackSegInputs')
]))
test_dataloader = dict(dataset=val_dataloader['dataset'])
