# The study's host (docs/study.md): a DeiT-like ViT with 12 layers (so that
# the papers' layer placements carry over), 64 dims, 4 heads, on 8x8 = 64
# patches of the 32x32 digit canvas. The patch stem overlaps (kernel 8,
# stride 4, padding 2: mmpretrain PatchEmbed's patch_cfg, which every
# method backbone built on mmpretrain's ViT accepts).
_base_ = ['./_base_/digits_canvas.py']

embed_dims = 64
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='VisionTransformer',
        arch=dict(embed_dims=embed_dims, num_layers=12, num_heads=4,
                  feedforward_channels=4 * embed_dims),
        img_size=32,
        patch_size=4,
        patch_cfg=dict(kernel_size=8, stride=4, padding=2),
        drop_path_rate=0.1,
        out_type='cls_token',
        init_cfg=[
            dict(type='TruncNormal', layer='Linear', std=.02),
            dict(type='Constant', layer='LayerNorm', val=1., bias=0.)
        ]),
    neck=None,
    head=dict(
        type='VisionTransformerClsHead',
        num_classes=10,
        in_channels=embed_dims,
        # DeiT's initialisation of the classifier (truncated normal, as its
        # other linear layers). mmpretrain's default for this head is zero,
        # which left the host at chance for hundreds of steps (docs/study.md)
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02),
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1,
                  mode='original')))
