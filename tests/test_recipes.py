"""Each base recipe builds, trains one step and predicts in its toolbox."""
import math

import pytest

from .utils import TINY_MODELS, tiny_config, train_and_predict_one_batch

EXPECTED_METRIC = {
    'configs/_base_/swin_s_in1k.py': 'accuracy/top1',
    'configs/_base_/deit_s_in1k.py': 'accuracy/top1',
    'configs/_base_/swin_s_cascade_mask_rcnn_3x_coco.py': 'coco/segm_mAP',
    'configs/_base_/swin_s_upernet_ade20k.py': 'mIoU',
    'configs/_base_/swin_t_k400.py': 'acc/top1',
    'configs/stvit_r_swin_s_coco.py': 'coco/segm_mAP',
    'configs/stvit_r_swin_b_coco.py': 'coco/segm_mAP',
    'configs/_base_/swin_b_cascade_mask_rcnn_3x_coco.py': 'coco/segm_mAP',
    'configs/stvit_r_swin_s_in1k.py': 'accuracy/top1',
    'configs/stvit_r_swin_b_in1k.py': 'accuracy/top1',
    'configs/stvit_r_swin_s_upernet_ade20k.py': 'mIoU',
    'configs/stvit_swin_t_in1k.py': 'accuracy/top1',
    'configs/stvit_swin_s_in1k.py': 'accuracy/top1',
    'configs/stvit_swin_b_in1k.py': 'accuracy/top1',
    'configs/stvit_swin_t_k400.py': 'acc/top1',
    'configs/stvit_swin_s_k400.py': 'acc/top1',
    'configs/stvit_deit_t_in1k.py': 'accuracy/top1',
    'configs/stvit_deit_s_in1k.py': 'accuracy/top1',
    'configs/stvit_deit_b_in1k.py': 'accuracy/top1',
    'configs/hvit_pvtv2_b1_tinyimagenet.py': 'accuracy/top1',
    'configs/hvit_deit_s_in1k.py': 'accuracy/top1',
    'configs/hvit_swin_t_in1k.py': 'accuracy/top1',
    'configs/hvit_deit_s_cifar100_384.py': 'accuracy/top1',
    'configs/hvit_deit_s_dogs_448.py': 'accuracy/top1',
    'configs/integrated_deit_t_in1k.py': 'accuracy/top1',
    'configs/integrated_deit_s_in1k.py': 'accuracy/top1',
    'configs/integrated_deit_b_in1k.py': 'accuracy/top1',
    'configs/dgssa_swin_t_in1k.py': 'accuracy/top1',
    'configs/dgssa_swin_s_in1k.py': 'accuracy/top1',
    'configs/dgssa_swin_b_in1k.py': 'accuracy/top1',
    'configs/dgssa_swin_s_coco.py': 'coco/segm_mAP',
    'configs/dgssa_swin_s_upernet_ade20k.py': 'mIoU',
    'configs/sait_deit_s_m07_in1k.py': 'accuracy/top1',
    'configs/sait_deit_s_v05_in1k.py': 'accuracy/top1',
    'configs/asvit_deit_s_in1k.py': 'accuracy/top1',
    'configs/asvit_deit_t_in1k.py': 'accuracy/top1',
    'configs/pruned_deit_s_upernet_ade20k.py': 'mIoU',
}


# an untrained detector scores below the recipe's threshold; keep its boxes
# so that the COCO metric has something to evaluate
PREDICT_ALL = {
    'configs/_base_/swin_s_cascade_mask_rcnn_3x_coco.py':
    dict(model=dict(test_cfg=dict(rcnn=dict(score_thr=0.0)))),
    'configs/stvit_r_swin_s_coco.py':
    dict(model=dict(test_cfg=dict(rcnn=dict(score_thr=0.0)))),
    'configs/stvit_r_swin_b_coco.py':
    dict(model=dict(test_cfg=dict(rcnn=dict(score_thr=0.0)))),
    'configs/_base_/swin_b_cascade_mask_rcnn_3x_coco.py':
    dict(model=dict(test_cfg=dict(rcnn=dict(score_thr=0.0)))),
    'configs/dgssa_swin_s_coco.py':
    dict(model=dict(test_cfg=dict(rcnn=dict(score_thr=0.0)))),
}


@pytest.mark.parametrize('config', sorted(TINY_MODELS))
def test_recipe_train_step_and_predict(config, tmp_path, tiny_data_dir):
    cfg = tiny_config(config, tmp_path / 'work', tiny_data_dir)
    cfg.merge_from_dict(PREDICT_ALL.get(config, {}))
    losses, preds, metrics = train_and_predict_one_batch(cfg)
    assert losses and all(math.isfinite(float(v)) for v in losses.values())
    assert len(preds) == cfg.test_dataloader.batch_size
    assert EXPECTED_METRIC[config] in metrics
