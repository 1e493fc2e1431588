# STViT-R-Swin-B ImageNet-1k in the authors' released layout (see
# stvit_r_swin_s_authors_in1k.py); drop path 0.4 as in their Swin-B run.
_base_ = './stvit_r_swin_s_authors_in1k.py'

authors_checkpoint = 'https://huggingface.co/csncsn/STViT-R/resolve/main/STViT-R-Swin-B.pth'  # noqa
model = dict(
    backbone=dict(arch='base', drop_path_rate=0.4),
    head=dict(in_channels=1024))
