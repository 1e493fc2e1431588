# The trained study host with training-free token pruning (docs/study.md):
# before layer 3 (0-based; SaiT-S's placement) the patch tokens are scored
# by TIS (SaiT's token importance score, from layer 2's attention) and the
# best round(rho * 65) - 1 are kept (value selector, rho = 0.5); the others
# are dropped. The host's weights load unchanged (the backbone adds no
# parameter; TokenPrunedClassifier holds no teacher here and takes test-time
# settings, e.g. tools/analysis/density_sweep.py); scorer='cls' is EViT's
# class attention, 'random' the floor.
_base_ = ['./digits_deit_host.py']

model = dict(
    type='mmvitaccel.TokenPrunedClassifier',
    backbone=dict(
        type='mmvitaccel.TokenPrunedVisionTransformer',
        prune_before=(3, ),
        scorer='tis',
        selector='value',
        density=0.5,
        test_execution='drop'))
