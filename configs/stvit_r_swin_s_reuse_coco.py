# STViT-R-Swin-S with semantic tokens generated once, Cascade Mask R-CNN 3x
# on COCO: the ablation of the STViT paper's Table 9, semantic tokens
# "produced only once in the first dumbbell unit and reused as initial
# cluster centers in the subsequent dumbbell units". Units 2 and 3 run their
# STGM from the previous unit's semantic tokens (after its semantic blocks)
# instead of pooling the image tokens. Same parameters and names as
# configs/stvit_r_swin_s_coco.py, whose checkpoint it loads.
_base_ = './stvit_r_swin_s_coco.py'

model = dict(
    backbone=dict(semantic_reuse=True, reuse_from='previous_unit'))
