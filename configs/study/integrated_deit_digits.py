# Integrated-DeiT on the digits host (docs/study.md): the paper's Table 2
# placement unchanged, DGSSA (static attention) in layers 1-2 (0-based;
# layer 0 stays dynamic) and GLAD at layers 3, 5, 7. The GLAD token counts
# keep the paper's shares of the sequence (197 -> 127 -> 77 -> 35, class
# token included): 65 -> 42 -> 25 -> 12 on the host's 64 patches + 1.
# tools/glad_search.py on the trained host may choose other layers and
# counts (model.backbone.glad_layers / glad_tokens).
# GLAD token distillation and the logit cross-entropy come from the trained
# host, the frozen teacher (its backbone and head).
# Before training, write the dynamic-guided init from the host's real
# attention (the backbone starts from it; the head from the host):
#   python tools/dgssa_init.py configs/study/integrated_deit_digits.py \
#       --checkpoint HOST.pth --out DGSSA.pth
#   --cfg-options load_from=HOST.pth model.backbone.init_cfg.checkpoint=DGSSA.pth \
#       model.teacher_checkpoint=HOST.pth model.teacher_head.init_cfg.checkpoint=HOST.pth
_base_ = ['./_base_/host_finetune.py']

embed_dims = 64
host_arch = dict(embed_dims=embed_dims, num_layers=12, num_heads=4,
                 feedforward_channels=4 * embed_dims)
model = dict(
    type='mmvitaccel.GLADDistillClassifier',
    backbone=dict(
        type='mmvitaccel.DGSSAVisionTransformer',
        static_layers=(1, 2),
        static_init='dg',
        glad_layers=(3, 5, 7),
        glad_tokens=(42, 25, 12),
        init_cfg=dict(_delete_=True, type='Pretrained', checkpoint=None)),
    # the host's backbone and head, frozen (weights: teacher_checkpoint)
    teacher=dict(
        type='mmpretrain.VisionTransformer',
        arch=host_arch,
        img_size=32,
        patch_size=4,
        patch_cfg=dict(kernel_size=8, stride=4, padding=2)),
    teacher_checkpoint=None,
    teacher_head=dict(
        type='mmpretrain.VisionTransformerClsHead',
        num_classes=10,
        in_channels=embed_dims,
        init_cfg=dict(type='Pretrained', checkpoint=None, prefix='head.')),
    distill_weight=1.0,
    kd_weight=1.0)

# the static logits are like the position embedding: no weight decay
optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={'.static_logits': dict(decay_mult=0.0)}))
