# The rows of the dense evidence (docs/study.md, "Dense prediction"), as
# data for tools/analysis/dense_study.py (projects/digits_study/study/dense.py).
#
# Every trained row fine-tunes from a pretrained classifier, as a user starts
# from an ImageNet checkpoint: the backbone's init_cfg reads the host's
# backbone.* weights through the backbone's own loader, the neck and heads
# start as the recipe initialises them. One recipe and one budget per task.
#
# A task:
#   metrics         the test metrics of the CSV (evaluator keys)
#   rows            the trained rows: each dense reference (reference None)
#                   and the method rows compared with it
#   host_option     (optional) the cfg key that receives the checkpoint a
#                   row's backbone starts from (default
#                   model.backbone.init_cfg.checkpoint)
#   host_layout     (optional) 'as_trained' (default: the host checkpoint
#                   itself) or 'official' (the Swin host in the official
#                   Swin layout, which upstream Video Swin inflates)
# A row:
#   name            the CSV's method column
#   config          its config (relative to the repository root), or None
#                   for a method of the switch
#   method          None, or a method of the switch (mmvitaccel.apis.METHODS,
#                   docs/accelerate.md): the row's config is then its
#                   reference's converted by accelerate_config, the config
#                   that `python tools/accelerate.py REFERENCE --method M`
#                   writes, so that the study measures what a user gets
#   host            'swin' (configs/study/dense/swin_host.py) or 'deit' (the
#                   classification study's host, configs/study/
#                   digits_deit_host.py): the checkpoint its backbone starts
#                   from (the task's host_option)
#   dgssa_init      True: tools/dgssa_init.py runs on the host first, and the
#                   backbone starts from its output instead (static logits
#                   from the host's mean attention)
#   reference       the name of the dense row it is compared with (speed and
#                   FLOPs ratios; None for a dense row)
#   training_free   True: the dense reference's fine-tuned weights are also
#                   tested in this row's model with no training (the
#                   backbone read by the row's own loader, the neck and
#                   heads taken as they are; DGSSA's static logits from
#                   tools/dgssa_init.py on the fine-tuned backbone)
#   paper           what the method's paper reports for the task (None: no
#                   figure for it; DGSSA reports none for detection or
#                   segmentation, SaiT and AS-ViT only classify)

TASKS = dict(
    detection=dict(
        metrics=('coco/bbox_mAP', 'coco/segm_mAP'),
        rows=[
            dict(name='Swin', config='configs/study/dense/swin_cascade.py',
                 method=None,
                 host='swin', dgssa_init=False, reference=None,
                 training_free=False,
                 paper=None),
            dict(name='STViT-R',
                 config=None, method='stvit-r',
                 host='swin', dgssa_init=False, reference='Swin',
                 training_free=True,
                 paper='COCO, Swin-S: 51.8 box / 44.7 mask AP, '
                 'backbone FLOPs −31%'),
            dict(name='DGSSA-Swin',
                 config=None, method='dgssa', host='swin',
                 dgssa_init=True, reference='Swin', training_free=True,
                 paper=None),
        ]),
    segmentation=dict(
        metrics=('mIoU', ),
        rows=[
            dict(name='Swin', config='configs/study/dense/swin_upernet.py',
                 method=None,
                 host='swin', dgssa_init=False, reference=None,
                 training_free=False,
                 paper=None),
            dict(name='STViT-R',
                 config=None, method='stvit-r',
                 host='swin', dgssa_init=False, reference='Swin',
                 training_free=True,
                 paper='ADE20K: −1.0 / −0.8 mIoU, FLOPs −31%'),
            dict(name='DGSSA-Swin',
                 config=None, method='dgssa', host='swin',
                 dgssa_init=True, reference='Swin', training_free=True,
                 paper=None),
            dict(name='DeiT', config='configs/study/dense/deit_upernet.py',
                 method=None,
                 host='deit', dgssa_init=False, reference=None,
                 training_free=False,
                 paper=None),
            # not the switch's: it converts mmpretrain's ViT classifiers,
            # and this segmentor's DeiT is already our pruning ViT (with
            # nothing pruned) feeding TokenRestoreNeck
            dict(name='Pruned DeiT',
                 config='configs/study/dense/pruned_deit_upernet.py',
                 method=None,
                 host='deit', dgssa_init=False, reference='DeiT',
                 training_free=True,
                 paper=None),
        ]),
    video=dict(
        metrics=('acc/top1', ),
        # upstream inflates a 2-D Swin given as ``pretrained`` with
        # ``pretrained2d=True``, in the official layout
        host_option='model.backbone.pretrained',
        host_layout='official',
        rows=[
            dict(name='Video Swin',
                 config='configs/study/dense/video_swin.py',
                 method=None, host='swin',
                 dgssa_init=False, reference=None, training_free=False,
                 paper=None),
            dict(name='STViT',
                 config=None, method='stvit',
                 host='swin', dgssa_init=False, reference='Video Swin',
                 training_free=False,
                 paper='Kinetics-400, Video Swin-T: −0.3 top-1, FLOPs '
                 '−27%, FPS +25%'),
        ]),
)
