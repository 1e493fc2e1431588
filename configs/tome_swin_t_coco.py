# ToMe in Swin-T Mask R-CNN 1x COCO, training-free: mmdet's own recipe and
# released weights, with r = 16 of the 49 tokens of every 7x7 window merged
# in every block (the window design, docs/tome.md#swin). Every map the FPN
# receives has the upstream size.
#   python tools/test.py configs/tome_swin_t_coco.py MASK_RCNN_SWIN_T.pth
# Another r: --cfg-options model.backbone.r=8 (or one a stage, "[0,0,16,0]");
# the stage design: model.backbone.design=stage (stage_ratio 0.5 in stage 3).
_base_ = 'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'

custom_imports = dict(imports=['mmvitaccel'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        type='mmvitaccel.ToMeSwinTransformer', r=16, design='window'))
load_from = ('https://download.openmmlab.com/mmdetection/v2.0/swin/'
             'mask_rcnn_swin-t-p4-w7_fpn_1x_coco/'
             'mask_rcnn_swin-t-p4-w7_fpn_1x_coco_20210902_120937-9d6b7cfa.pth')
