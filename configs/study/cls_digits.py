# Class-attention pruning on the digits host (docs/study.md), fine-tuned on
# the study's budget: what `python tools/accelerate.py
# configs/study/_base_/host_finetune.py --method cls` writes for this host.
# The class token's attention scores the tokens before 0-based layer 3
# (SaiT's location, scaled to 12 layers) and the value selector keeps half
# of them (density 0.5); training masks the pruned tokens' logits, testing
# drops them. Nothing is new: the student starts from the host (load_from)
# with every key.
#   --cfg-options load_from=HOST.pth
# It is the plain pruning beside configs/study/cls_merge_digits.py (prune
# and merge) and configs/study/tome_digits.py (merging) at the same FLOPs.
_base_ = ['./_base_/host_finetune.py']

model = dict(
    backbone=dict(
        type='mmvitaccel.TokenPrunedVisionTransformer',
        prune_before=(3, ),
        scorer='cls',
        selector='value',
        density=0.5,
        test_execution='drop'))
