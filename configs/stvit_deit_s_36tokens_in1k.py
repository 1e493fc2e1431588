# STViT-DeiT-S with 36 semantic tokens, one of the paper's variants of
# STViT-DeiT-S (16, 25, 36 and 49 tokens): stvit_deit_s_in1k.py with a
# 6x6 grid of initial centres; everything else as there.
_base_ = './stvit_deit_s_in1k.py'

model = dict(backbone=dict(semantic_tokens=36))
