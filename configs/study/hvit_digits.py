# hMHSA + cFFN on the digits host (docs/study.md): every one of the 12
# layers, as in the paper (4 heads -> 2 computed + 2 hallucinated maps;
# IHH on the 8x8 key grid; cFFN with t = 0.5, r = 2). The backbone starts
# from the host through its loader (init_cfg Pretrained: Q^/K^ take the
# first half of the host's heads, V whole; the IHH/CHH and the cFFN factors
# are new; the report lists them), the head from the host's head (its
# init_cfg; load_from would be refused: the host matches a fifth of this
# model's tensors by name, below the checkpoint check's share).
# For inference fold it with tools/reparameterize.py and test the folded
# weights with --cfg-options model.backbone.deploy=True.
#   --cfg-options model.backbone.init_cfg.checkpoint=HOST.pth \
#       model.head.init_cfg.checkpoint=HOST.pth
_base_ = ['./_base_/host_finetune.py']

model = dict(
    backbone=dict(
        type='mmvitaccel.HViTDeiT',
        hmhsa=True,
        cffn=True,
        cffn_ratio=0.5,
        cffn_branches=2,
        deploy=False,
        init_cfg=dict(_delete_=True, type='Pretrained', checkpoint=None)),
    head=dict(
        init_cfg=dict(_delete_=True, type='Pretrained', checkpoint=None,
                      prefix='head.')))
