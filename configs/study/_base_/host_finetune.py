# The trained methods' common budget (docs/study.md): every method starts
# from the trained digits host and is fine-tuned for the same 5 epochs with
# the same optimizer, one warm-up epoch (linear from lr * 0.01) and a cosine
# decay to 1e-5; validation at the end only. The study tool trains each
# method for 3 seeds with this schedule. Each method config inherits this
# file (the host and its data, with the fine-tuning schedule). An epoch is
# the host's: 4 canvases of each training scan, 68 iterations at batch 64,
# so 5 epochs are 340 iterations (a sixth of the host's 2,040).
_base_ = ['../digits_deit_host.py']

max_epochs = 5
warmup_epochs = 1
optim_wrapper = dict(optimizer=dict(lr=5e-4))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=True, begin=0,
         end=warmup_epochs, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True,
         begin=warmup_epochs, end=max_epochs, convert_to_iter_based=True)
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs,
                 val_interval=max_epochs)
default_hooks = dict(checkpoint=dict(interval=max_epochs, save_best=None))
