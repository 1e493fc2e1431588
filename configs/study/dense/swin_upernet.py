# The dense evidence's segmentor (docs/study.md, "Dense prediction"): the
# mmseg Swin UperNet recipe (configs/_base_/swin_s_upernet_ade20k.py: UPerHead
# with pooling scales 1-2-3-6 on the four stages, FCN auxiliary head on
# stage 3 at weight 0.4, AdamW wd 0.01, linear warm-up then poly decay) on
# DigitsSegmentation scenes (11 classes: background and the 10 digits), with
# the digits Swin host (configs/study/dense/swin_host.py) as the backbone.
# Scaled down for two CPU cores, and nothing else changed:
#   - backbone: the host's Swin (embed 32, depths 2-2-12-2), drop path 0.1;
#   - widths: UPerHead 64 channels (512), auxiliary head 32 (256);
#   - data: 160 px scenes as they are (no resize, crop, flip or photometric
#     change: a mirrored digit is another shape), a new draw of every
#     training scene per epoch, so the loop counts epochs (the recipe's
#     iterations with an infinite sampler cannot redraw); pixel statistics
#     of the host (127.5, 127.5);
#   - schedule: 9 epochs of 540 new scenes (68 iterations at batch 8; 12
#     epochs gave 3.4 points more mIoU, but with detection and video over
#     the dense evidence's 2 hours); a one-epoch linear warm-up, then the
#     recipe's poly decay; AdamW lr 6e-4
#     at batch 8 (the recipe: 6e-5 at batch 16 for 160k iterations), the
#     heads at 10 times that (lr_mult 10, as mmseg's SegFormer recipe: the
#     heads start from nothing while the backbone is pretrained).
# And one change of the loss: the recipe's cross-entropy, on both heads,
# weighs background 0.1 and each digit 1 (class_weight): 88% of a scene's
# pixels are background, and with equal weights the segmentor predicted
# background everywhere after 8 epochs (docs/study.md, "Dense prediction").
# The backbone starts from the host checkpoint, as in swin_cascade.py.
_base_ = '../../_base_/swin_s_upernet_ade20k.py'
# the digits datasets (projects/digits_study)
custom_imports = dict(
    imports=['mmvitaccel', 'projects.digits_study'], allow_failed_imports=False)

host_checkpoint = 'work_dirs/dense_study/digits_swin_host.pth'
canvas_size = 160
embed_dims = 32
max_epochs = 9
# background, then the 10 digits
class_weight = [0.1] + [1.0] * 10

model = dict(
    data_preprocessor=dict(mean=[127.5] * 3, std=[127.5] * 3,
                           bgr_to_rgb=False,
                           size=(canvas_size, canvas_size)),
    backbone=dict(
        pretrain_img_size=64,
        embed_dims=embed_dims,
        depths=[2, 2, 12, 2],
        num_heads=[1, 2, 4, 8],
        drop_path_rate=0.1,
        init_cfg=dict(type='Pretrained', checkpoint=host_checkpoint)),
    decode_head=dict(in_channels=[embed_dims * 2**i for i in range(4)],
                     channels=64, num_classes=11,
                     loss_decode=dict(class_weight=class_weight)),
    auxiliary_head=dict(in_channels=4 * embed_dims, channels=32,
                        num_classes=11,
                        loss_decode=dict(class_weight=class_weight)))

scenes = dict(type='mmvitaccel.DigitsSegmentation', canvas_size=canvas_size,
              split_seed=0, canvas_seed=0,
              pipeline=[dict(type='PackSegInputs')])
train_dataloader = dict(
    _delete_=True,
    batch_size=8,
    num_workers=0,
    sampler=dict(type='mmvitaccel.EpochSampler', shuffle=True),
    dataset=dict(split='train', num_scenes=540, **scenes))
val_dataloader = dict(
    _delete_=True,
    batch_size=8,
    num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(split='val', **scenes))
test_dataloader = dict(val_dataloader, dataset=dict(split='test', **scenes))
val_evaluator = dict(type='IoUMetric', iou_metrics=['mIoU'])
test_evaluator = val_evaluator

optim_wrapper = dict(
    optimizer=dict(lr=6e-4),
    paramwise_cfg=dict(custom_keys={
        'decode_head': dict(lr_mult=10.),
        'auxiliary_head': dict(lr_mult=10.)
    }))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=True, begin=0,
         end=1, convert_to_iter_based=True),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=1, end=max_epochs,
         by_epoch=True, convert_to_iter_based=True)
]
train_cfg = dict(_delete_=True, type='EpochBasedTrainLoop',
                 max_epochs=max_epochs, val_interval=max_epochs)
default_hooks = dict(
    logger=dict(interval=20, log_metric_by_epoch=True),
    checkpoint=dict(by_epoch=True, interval=max_epochs, max_keep_ckpts=1))
custom_hooks = [dict(type='mmvitaccel.StepSeedHook')]
env_cfg = dict(dist_cfg=dict(backend='gloo'))
randomness = dict(seed=0, deterministic=False)
