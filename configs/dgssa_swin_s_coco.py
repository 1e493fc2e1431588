# DGSSA-Swin-S Cascade Mask R-CNN 3x on COCO (the Swin paper's recipe, see
# _base_/swin_s_cascade_mask_rcnn_3x_coco.py): static window attention in
# 12 blocks of Swin-S, blocks 1-12 over all stages (the paper keeps the 0th
# dynamic); shift and padding masks apply per window.
# The backbone starts from a DGSSA-Swin-S checkpoint (an ImageNet-trained
# dgssa_swin_s_in1k.py model, or the dynamic-guided init of
# tools/dgssa_init.py); with a plain Swin-S checkpoint set
# static_init='uniform' (the relative position bias is folded in).
_base_ = './_base_/swin_s_cascade_mask_rcnn_3x_coco.py'

model = dict(
    backbone=dict(
        type='mmvitaccel.DGSSASwinTransformer',
        static_blocks=12,
        static_start=1,
        static_init='dg',
        init_cfg=dict(
            type='Pretrained',
            checkpoint='work_dirs/dgssa_init/swin-small_dgssa.pth')))
optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={'static_logits': dict(decay_mult=0.)}))
