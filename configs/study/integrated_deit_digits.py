# Integrated-DeiT at the digits scale (docs/study.md): DGSSA static
# attention in layers 1-2 initialised from the trained host's mean attention
# (tools/dgssa_init.py), GLADs at 3, 5, 7 keeping 65 -> 42 -> 25 -> 12 tokens
# (class token included; the DeiT-S ratios 197 -> 127 -> 77 -> 35 of
# integrated_deit_s_in1k.py on 65 tokens; tools/glad_search.py searches
# them on the host instead), distilled from the trained host as teacher.
# Set host_checkpoint / the DGSSA init to the study's files with
# --cfg-options.
_base_ = ['./_base_/digits_canvas.py']

host_checkpoint = 'work_dirs/study/host.pth'
dgssa_checkpoint = 'work_dirs/study/host_dgssa.pth'
arch = dict(embed_dims=64, num_layers=12, num_heads=4,
            feedforward_channels=256)
stem = dict(img_size=32, patch_size=4,
            patch_cfg=dict(kernel_size=8, stride=4, padding=2))
model = dict(
    type='mmvitaccel.GLADDistillClassifier',
    backbone=dict(
        type='mmvitaccel.DGSSAVisionTransformer',
        arch=arch,
        drop_path_rate=0.1,
        static_layers=(1, 2),
        static_init='dg',
        glad_layers=(3, 5, 7),
        glad_tokens=(42, 25, 12),
        init_cfg=dict(type='Pretrained', checkpoint=dgssa_checkpoint),
        **stem),
    teacher=dict(
        type='mmpretrain.VisionTransformer',
        arch=arch,
        init_cfg=dict(type='Pretrained', checkpoint=host_checkpoint,
                      prefix='backbone.'),
        **stem),
    teacher_head=dict(
        type='mmpretrain.VisionTransformerClsHead',
        num_classes=10,
        in_channels=64,
        init_cfg=dict(type='Pretrained', checkpoint=host_checkpoint,
                      prefix='head.')),
    distill_weight=1.0,
    kd_weight=1.0,
    head=dict(
        type='VisionTransformerClsHead',
        num_classes=10,
        in_channels=64,
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1,
                  mode='original')))
optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={'.static_logits': dict(decay_mult=0.0)}))
