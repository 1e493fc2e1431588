# The small-scale study's data and schedule (docs/study.md): scikit-learn's
# handwritten digits on a 32x32 cluttered canvas, stratified 60/20/20 splits,
# a new training canvas per sample and epoch (EpochSampler), fixed val/test
# canvases; AdamW with a linear warm-up and a cosine decay, on the CPU.
# An epoch shows each of the 1,078 training scans on 4 canvases of its own
# (68 iterations at batch 64), so that the schedule counts enough steps.
default_scope = 'mmpretrain'
custom_imports = dict(
    imports=['mmvitaccel', 'projects.digits_study'], allow_failed_imports=False)

canvas = dict(
    type='mmvitaccel.DigitsCanvas',
    canvas_size=32,
    scale=(0.4, 0.65),
    max_angle=12.,
    num_fragments=2,
    fragment_size=(3, 4),
    noise=0.1,
    split_seed=0,
    canvas_seed=0,
    pipeline=[dict(type='PackInputs')])

data_preprocessor = dict(
    num_classes=10, mean=[127.5] * 3, std=[127.5] * 3, to_rgb=False)

train_dataloader = dict(
    batch_size=64,
    num_workers=0,
    sampler=dict(type='mmvitaccel.EpochSampler', shuffle=True),
    dataset=dict(split='train', repeats=4, **canvas))
val_dataloader = dict(
    batch_size=128,
    num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(split='val', **canvas))
test_dataloader = dict(
    batch_size=128,
    num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(split='test', **canvas))
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_evaluator = val_evaluator

max_epochs = 30
warmup_epochs = 5
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=2e-3, weight_decay=0.05,
                   betas=(0.9, 0.999)),
    clip_grad=dict(max_norm=5.0),
    paramwise_cfg=dict(
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        custom_keys={
            '.cls_token': dict(decay_mult=0.0),
            '.pos_embed': dict(decay_mult=0.0)
        }))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=True, begin=0,
         end=warmup_epochs, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True,
         begin=warmup_epochs, end=max_epochs, convert_to_iter_based=True)
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=5)
val_cfg = dict()
test_cfg = dict()

default_hooks = dict(
    timer=dict(type='IterTimerHook'),
    logger=dict(type='LoggerHook', interval=50),
    param_scheduler=dict(type='ParamSchedulerHook'),
    checkpoint=dict(type='CheckpointHook', interval=10, max_keep_ckpts=1,
                    save_best='auto'),
    sampler_seed=dict(type='DistSamplerSeedHook'),
    visualization=dict(type='VisualizationHook', enable=False))
custom_hooks = [dict(type='mmvitaccel.StepSeedHook')]

env_cfg = dict(
    cudnn_benchmark=False,
    mp_cfg=dict(mp_start_method='fork', opencv_num_threads=0),
    dist_cfg=dict(backend='gloo'))
vis_backends = [dict(type='LocalVisBackend')]
visualizer = dict(type='UniversalVisualizer', vis_backends=vis_backends)
log_level = 'INFO'
load_from = None
resume = False
randomness = dict(seed=0, deterministic=False)
auto_scale_lr = dict(base_batch_size=64)
