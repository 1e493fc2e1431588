# The dense evidence's detector (docs/study.md, "Dense prediction"): the
# headline recipe's Cascade Mask R-CNN (configs/_base_/
# swin_s_cascade_mask_rcnn_3x_coco.py: FPN, RPN, three 4conv1fc GIoU box
# heads, mask head, AdamW wd 0.05, step decay at 3/4 and 11/12 of the
# schedule) on DigitsInstances scenes, with the digits Swin host
# (configs/study/dense/swin_host.py) as the backbone. Scaled down for two
# CPU cores, and nothing else changed:
#   - backbone: the host's Swin (embed 32, depths 2-2-12-2), drop path 0.1;
#   - widths: FPN, RPN and RoI heads 32 channels (256), box head fc 256
#     (1024); RoIs sampled per image 64 (512), RPN proposals 300 in
#     training (2000) and 100 in testing (1000), 20 detections per image
#     (100), as a scene holds 3-6 digits (a COCO image up to 100 objects);
#   - data: 160 px scenes as they are (no resize, crop or flip: a mirrored
#     digit is another shape), a new draw of every training scene per
#     epoch; pixel statistics of the host (127.5, 127.5);
#   - float32 (AMP is for GPUs);
#   - the RoIAlign layers run torchvision's kernel (mmcv's use_torchvision):
#     the same sampling, outputs and gradients equal bit for bit
#     (tests/test_dense_study.py), and on the CPU a training step 21% faster
#     (1.75 s against 1.38 s at batch 8 on one thread: mmcv's CPU backward
#     is a quarter of a step);
#   - schedule: 7 epochs of 540 new scenes (68 iterations at batch 8; 3,780
#     scenes in all), the recipe's steps near its 3/4 and 11/12 (epochs 5
#     and 6), a 200-iteration linear warm-up; AdamW lr 2e-4 at batch 8
#     (the recipe: 1e-4 at batch 16, for 36 epochs of COCO). The heads'
#     width and this budget are what two cores afford in the dense
#     evidence's 2 hours (8 epochs gave 6.6 points more bbox AP, but took the
#     command over them): a training step of 8 scenes takes 1.2 s at width
#     32, 2.2 s at 64.
# The backbone starts from the host checkpoint, read as any Swin classifier
# checkpoint (backbone.* keys); the study tool copies the trained host to
# the path below.
_base_ = '../../_base_/swin_s_cascade_mask_rcnn_3x_coco.py'
# the digits datasets (projects/digits_study)
custom_imports = dict(
    imports=['mmvitaccel', 'projects.digits_study'], allow_failed_imports=False)

host_checkpoint = 'work_dirs/dense_study/digits_swin_host.pth'
canvas_size = 160
embed_dims = 32
channels = 32
max_epochs = 7
# the recipe's RoIAlign (aligned, adaptive sampling) on torchvision's kernel
roi_layer = dict(type='RoIAlign', output_size=7, sampling_ratio=0,
                 use_torchvision=True)

model = dict(
    data_preprocessor=dict(mean=[127.5] * 3, std=[127.5] * 3,
                           bgr_to_rgb=False),
    backbone=dict(
        embed_dims=embed_dims,
        depths=[2, 2, 12, 2],
        num_heads=[1, 2, 4, 8],
        drop_path_rate=0.1,
        convert_weights=False,
        init_cfg=dict(type='Pretrained', checkpoint=host_checkpoint)),
    neck=dict(in_channels=[embed_dims * 2**i for i in range(4)],
              out_channels=channels),
    rpn_head=dict(in_channels=channels, feat_channels=channels),
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=channels, roi_layer=roi_layer),
        # the recipe's three stages; only widths and classes change
        bbox_head=[
            dict(type='ConvFCBBoxHead', num_shared_convs=4,
                 num_shared_fcs=1, in_channels=channels,
                 conv_out_channels=channels, fc_out_channels=256,
                 roi_feat_size=7, num_classes=10,
                 bbox_coder=dict(type='DeltaXYWHBBoxCoder',
                                 target_means=[0.] * 4, target_stds=stds),
                 reg_class_agnostic=False, reg_decoded_bbox=True,
                 norm_cfg=dict(type='SyncBN', requires_grad=True),
                 loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False,
                               loss_weight=1.0),
                 loss_bbox=dict(type='GIoULoss', loss_weight=10.0))
            for stds in ([0.1, 0.1, 0.2, 0.2], [0.05, 0.05, 0.1, 0.1],
                         [0.033, 0.033, 0.067, 0.067])
        ],
        mask_roi_extractor=dict(out_channels=channels,
                                roi_layer=dict(roi_layer, output_size=14)),
        mask_head=dict(in_channels=channels, conv_out_channels=channels,
                       num_classes=10)),
    train_cfg=dict(
        rpn_proposal=dict(nms_pre=300, max_per_img=300),
        # the recipe's three stages (IoU 0.5, 0.6, 0.7); 64 RoIs each
        rcnn=[
            dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=iou,
                               neg_iou_thr=iou, min_pos_iou=iou,
                               match_low_quality=False, ignore_iof_thr=-1),
                 sampler=dict(type='RandomSampler', num=64,
                              pos_fraction=0.25, neg_pos_ub=-1,
                              add_gt_as_proposals=True),
                 mask_size=28, pos_weight=-1, debug=False)
            for iou in (0.5, 0.6, 0.7)
        ]),
    test_cfg=dict(rpn=dict(nms_pre=100, max_per_img=100),
                  rcnn=dict(max_per_img=20)))

#: PackDetInputs' meta keys and the raw instances, from which CocoMetric
#: makes its ground truth (no annotation file)
meta_keys = ('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor',
             'flip', 'flip_direction', 'instances')
scenes = dict(type='mmvitaccel.DigitsInstances', canvas_size=canvas_size,
              split_seed=0, canvas_seed=0)
# Resize to the canvas is the identity here; it records the scale factor
# that the detectors' predictions are mapped back with
train_pipeline = [
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=(canvas_size, canvas_size), keep_ratio=True),
    dict(type='PackDetInputs')
]
test_pipeline = [
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=(canvas_size, canvas_size), keep_ratio=True),
    dict(type='PackDetInputs', meta_keys=meta_keys)
]
train_dataloader = dict(
    _delete_=True,
    batch_size=8,
    num_workers=0,
    sampler=dict(type='mmvitaccel.EpochSampler', shuffle=True),
    batch_sampler=None,
    dataset=dict(split='train', num_scenes=540, pipeline=train_pipeline,
                 **scenes))
val_dataloader = dict(
    _delete_=True,
    batch_size=8,
    num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(split='val', pipeline=test_pipeline, **scenes))
test_dataloader = dict(
    val_dataloader,
    dataset=dict(split='test', pipeline=test_pipeline, **scenes))
val_evaluator = dict(_delete_=True, type='CocoMetric', ann_file=None,
                     metric=['bbox', 'segm'], format_only=False)
test_evaluator = val_evaluator

optim_wrapper = dict(type='OptimWrapper', optimizer=dict(lr=2e-4))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0,
         end=200),
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True,
         milestones=[5, 6], gamma=0.1)
]
train_cfg = dict(max_epochs=max_epochs, val_interval=max_epochs)
default_hooks = dict(
    logger=dict(interval=20),
    checkpoint=dict(interval=max_epochs, max_keep_ckpts=1))
custom_hooks = [dict(type='mmvitaccel.StepSeedHook')]
env_cfg = dict(dist_cfg=dict(backend='gloo'))
randomness = dict(seed=0, deterministic=False)
auto_scale_lr = dict(enable=False, base_batch_size=8)
