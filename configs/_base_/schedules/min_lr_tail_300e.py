# The hMHSA + cFFN paper's evaluation protocol on a 300-epoch recipe with 20
# warm-up epochs: 10 extra epochs at the minimum LR, top-1 averaged over them
# by MinLRAverageHook. The paper states it for its Tiny-ImageNet study ("we
# train the model at the minimum learning rate for an extra 10 epochs"); we
# apply it to every hMHSA/cFFN ImageNet recipe. mmengine updates the LR at
# the steps begin..end-1, so end=301 with T_max=280 sets eta_min at epoch 300
# (0-based) and keeps it for epochs 300-309.
# A recipe takes it with `param_scheduler = {{_base_.min_lr_300e_scheduler}}`
# and so on (the keys are not the runner's, because the upstream recipe that
# is the other base defines those). Upstream recipe: set
# train_cfg.max_epochs=300 and drop the hook.
min_lr_300e_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-3,
        by_epoch=True,
        end=20,
        convert_to_iter_based=True),
    dict(
        type='CosineAnnealingLR',
        eta_min=1e-5,
        by_epoch=True,
        begin=20,
        end=301,
        T_max=280)
]
min_lr_300e_train_cfg = dict(max_epochs=310)
min_lr_300e_hooks = [
    dict(type='mmvitaccel.MinLRAverageHook', epochs=10,
         metric='accuracy/top1')
]
