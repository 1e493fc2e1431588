# ToMe on the digits host (docs/study.md, docs/tome.md), fine-tuned on the
# study's budget: what `python tools/accelerate.py
# configs/study/_base_/host_finetune.py --method tome` writes for this
# 64-patch host, r = round(13 * 64 / 196) = 4 tokens merged in every layer
# (the paper's DeiT-S share), proportional attention on. Nothing is new: the
# student starts from the host (load_from) with every key.
#   --cfg-options load_from=HOST.pth
# The other reading of the paper, training without proportional attention:
#   --cfg-options model.backbone.prop_attn=False
_base_ = ['./_base_/host_finetune.py']

model = dict(
    backbone=dict(
        type='mmvitaccel.ToMeVisionTransformer', r=4, prop_attn=True))
