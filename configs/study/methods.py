# The trained methods of the small-scale study (docs/study.md), as data for
# tools/analysis/tradeoff_study.py (projects/digits_study/study/). Every
# method fine-tunes from the trained host on the same budget
# (configs/study/_base_/host_finetune.py) and seeds.
#
# An entry:
#   name, setting   the CSV's method and setting columns (one trained
#                   model per entry; ``settings`` adds test-time variants)
#   config          the method's config (inherits the host config)
#   cfg_options     fixed overrides for training and testing
#   init            'host': the host checkpoint goes to every key of
#                   ``host_options``; 'dgssa_init': in addition,
#                   tools/dgssa_init.py runs on the host first
#                   (``dgssa_init_args``) and its output goes to every key
#                   of ``dgssa_options``
#   host_options    cfg keys that receive the host checkpoint path
#                   (load_from: the student; the others: its teacher, or
#                   the loader of a backbone that converts the host's
#                   layout, and then the head's init_cfg)
#   dgssa_options   cfg keys that receive tools/dgssa_init.py's output
#   settings        test-time label -> cfg_options of the same weights
#                   ({} : the config's own)
#   search          None, or a tool that chooses part of the architecture on
#                   the host first: ``tool`` and ``args`` (run as ``python
#                   TOOL CONFIG --checkpoint HOST --out OUT *args``; OUT is
#                   JSON cfg-options, merged into the method's; setting
#                   labels may name them as {glad_layers} etc.)
#   prefer          None, or dict(setting, over, within): the short table
#                   (README) shows ``setting`` instead of ``over`` if it is
#                   faster and its top-1 within ``within`` of ``over``'s
#   fold            None, or how to make the inference form before testing:
#                   ``tool`` and ``args`` (run as ``python TOOL CONFIG CKPT
#                   OUT *args`` with the training cfg_options) and
#                   ``test_options`` (cfg_options to test the folded OUT)
#: what the entries share that start from the host with every key and
#: nothing else (the student's load_from)
FROM_HOST = dict(
    cfg_options={},
    init='host',
    host_options=('load_from', ),
    dgssa_options=(),
    fold=None)

#: what the two Integrated-DeiT entries share: DGSSA initialised from the
#: host by tools/dgssa_init.py, the host as the frozen teacher
INTEGRATED = dict(
    config='configs/study/integrated_deit_digits.py',
    cfg_options={},
    init='dgssa_init',
    host_options=('load_from', 'model.teacher_checkpoint',
                  'model.teacher_head.init_cfg.checkpoint'),
    dgssa_options=('model.backbone.init_cfg.checkpoint', ),
    dgssa_init_args=('--num-images', '512'),
    fold=None)

METHODS = [
    dict(
        name='STViT-DeiT',
        setting='16 tokens',
        config='configs/study/stvit_digits.py',
        settings={'16 tokens': {}},
        **FROM_HOST),
    dict(
        name='SaiT',
        setting='M0.7 + TIS distillation',
        config='configs/study/sait_digits.py',
        cfg_options={},
        init='host',
        host_options=('load_from', 'model.teacher.checkpoint'),
        dgssa_options=(),
        # the model trained with the mass selector, tested with it and with
        # the value selector at density 0.5 (no parameter depends on it)
        settings={
            'M0.7': {},
            'V0.5': {'model.backbone.selector': 'value',
                     'model.test_cfg.density': 0.5},
        },
        fold=None),
    dict(
        name='AS-ViT',
        setting='budget 0.65',
        config='configs/study/asvit_digits.py',
        cfg_options={},
        init='host',
        host_options=('load_from', 'model.teacher.checkpoint'),
        dgssa_options=(),
        # tested padded (each image keeps its own count, exact) and with
        # the paper's batched inference (every image of a batch keeps the
        # batch-mean count); the short table shows the batch mean if it is
        # faster and within 0.3 points of the padded top-1
        settings={
            'budget 0.65, padded': {},
            'budget 0.65, batch mean': {
                'model.backbone.batch_mode': 'mean',
                'model.test_cfg.batch_mode': 'mean'},
        },
        prefer=dict(setting='budget 0.65, batch mean',
                    over='budget 0.65, padded', within=0.003),
        fold=None),
    dict(
        name='Integrated-DeiT',
        setting='DGSSA 1-2, GLAD searched',
        # the GLAD layers and token counts are searched on the host
        search=dict(tool='tools/glad_search.py',
                    args=('--num-images', '512')),
        settings={'DGSSA 1-2, GLAD {glad_layers} to {glad_tokens}': {}},
        **INTEGRATED),
    dict(
        name='Integrated-DeiT, paper layout',
        setting='DGSSA 1-2, GLAD 3/5/7 to 42/25/12',
        # the config's own GLAD layout: Integrated-DeiT-S's layers (0-based
        # 3, 5, 7) and its token ratios (197 -> 127/77/35 scaled to 65)
        settings={},
        **INTEGRATED),
    dict(
        name='ToMe',
        setting='r=4',
        config='configs/study/tome_digits.py',
        settings={'r=4': {}},
        **FROM_HOST),
    # plain pruning and prune-and-merge, fine-tuned, at ToMe's FLOPs: the
    # class-attention scorer at density 0.5, which kept the most of the two
    # scorers training-free (docs/accelerate.md)
    dict(
        name='cls pruning, fine-tuned',
        setting='rho=0.5',
        config='configs/study/cls_digits.py',
        settings={'rho=0.5': {}},
        **FROM_HOST),
    dict(
        name='cls prune and merge, fine-tuned',
        setting='rho=0.5',
        config='configs/study/cls_merge_digits.py',
        settings={'rho=0.5': {}},
        **FROM_HOST),
    dict(
        name='hMHSA + cFFN',
        setting='all layers, folded',
        config='configs/study/hvit_digits.py',
        cfg_options={},
        init='host',
        host_options=('model.backbone.init_cfg.checkpoint',
                      'model.head.init_cfg.checkpoint'),
        dgssa_options=(),
        settings={'all layers, folded': {}},
        fold=dict(tool='tools/reparameterize.py',
                  args=('--check-shape', '2', '3', '32', '32'),
                  test_options={'model.backbone.deploy': True,
                                'model.backbone.init_cfg': None,
                                'model.head.init_cfg': None})),
]
