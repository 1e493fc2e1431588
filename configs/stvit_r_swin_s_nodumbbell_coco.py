# STViT-R-Swin-S without dumbbell units, Cascade Mask R-CNN 3x on COCO: the
# ablation of the STViT paper's Table 9, "STViT equipped with only the
# recovery module": stage 3 keeps Swin's blocks 0-4, blocks 5 and 6 are the
# STGM (the paper's "6th and 7th" layers, read 1-based), blocks 7-15
# semantic (local/global alternating) and the last two, 16 and 17, the
# recovery ("the last transformer layers": two bring the backbone FLOPs to
# within 2.3% of the full model's, which the paper keeps equal; docs/
# stvit.md). Everything else as configs/stvit_r_swin_s_coco.py. No
# checkpoint in this layout is released: the parent's STViT-R-Swin-S
# weights load by name (stem, stages 1, 2 and 4, and the stage-3 blocks
# whose shapes match, whatever their role there); the paper pre-trains each
# variant on ImageNet-1K first.
_base_ = './stvit_r_swin_s_coco.py'

model = dict(backbone=dict(layout='single', stgm_index=5, num_recovery=2))
