# Prune and merge on the digits host (docs/study.md, docs/tome.md), fine-tuned
# on the study's budget: what `python tools/accelerate.py
# configs/study/_base_/host_finetune.py --method cls --options
# merge_pruned=True` writes for this host. The class-attention pruning of
# configs/study/cls_digits.py, but every token it drops joins its most
# similar kept token, size-weighted, instead of being discarded; the
# merge needs the dropped tokens, so training drops them too. Nothing is
# new: the student starts from the host (load_from) with every key.
#   --cfg-options load_from=HOST.pth
_base_ = ['./cls_digits.py']

model = dict(backbone=dict(train_execution='drop', merge_pruned=True))
