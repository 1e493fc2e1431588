# STViT-R-Swin-S ImageNet-1k in the authors' released layout, which their
# checkpoint STViT-R-Swin-S.pth needs: convolutional stem, layer scale 1e-5 on
# the STGM/semantic/recovery blocks, their STGM form (no residual in STGM-1,
# [P; X_k1] and [S1; X_k2] keys, regions moved inside the map: at 224 the
# 10x10 unfold with stride 4, then the whole 14x14 map), projection of keys and
# values per gathered region (their cost), no G (their released runs), and
# the 7x7 last stage unshifted as in the official Swin. Their checkpoint loads
# through init_cfg (stvit_r_authors_converter); docs/stvit.md gives the FLOPs.
_base_ = './stvit_r_swin_s_in1k.py'

authors_checkpoint = 'https://huggingface.co/csncsn/STViT-R/resolve/main/STViT-R-Swin-S.pth'  # noqa
model = dict(
    backbone=dict(
        key_windows=(10, 14),
        recovery_window=27,
        stem='conv',
        layer_scale=1e-5,
        stgm_form='authors',
        kv_per_region=True,
        global_centres=False,
        shift_small_maps=False))
