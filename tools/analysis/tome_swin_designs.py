# Copyright (c) mmvitaccel contributors. All rights reserved.
"""ToMe's two Swin designs side by side, training-free
(:mod:`projects.digits_study.study.tome_designs`): the window design (each
window merges ``r`` tokens in every block) and the stage design (a stage's
map merged once), at several settings each, on the dense evidence's
fine-tuned Swin detector and segmentor, against backbone FLOPs, beside the
dense study's other training-free rows (STViT-R, DGSSA-Swin) on the same
weights.

The fine-tuned weights come from ``tools/analysis/dense_study.py``'s cache
(``--work-dir``); a missing one is trained there first. Writes
``tome_swin_designs.csv`` and ``.png`` to ``--out``.

Example::

    python tools/analysis/tome_swin_designs.py --out docs/study/dense
"""
import argparse
import os
import os.path as osp
import sys

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, REPO)

import mmvitaccel  # noqa: E402
from projects.digits_study import study  # noqa: E402
from projects.digits_study.study import dense, tome_designs  # noqa: E402
from projects.digits_study.study.training import parallel_map  # noqa: E402
from mmengine.config import DictAction  # noqa: E402
from mmvitaccel.apis.harness import load_config  # noqa: E402
from mmvitaccel.apis.launch import refuse  # noqa: E402

mmvitaccel.compat.apply()  # our tools' environment fixes

#: task -> the evaluator key reported
METRICS = {'detection': 'coco/bbox_mAP', 'segmentation': 'mIoU'}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="ToMe's window and stage designs on the dense Swins")
    parser.add_argument('--tasks', nargs='+', default=list(METRICS),
                        choices=list(METRICS))
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1],
                        help='the dense study\'s fine-tuning seeds')
    parser.add_argument('--work-dir', default='work_dirs/dense_study',
                        help='the dense study\'s cache')
    parser.add_argument('--out', default='work_dirs/tome_swin_designs')
    parser.add_argument('--jobs', type=int, default=2,
                        help='trainings and tests at once')
    parser.add_argument('--host-checkpoint',
                        help='use this Swin host instead of the cached one')
    parser.add_argument('--dgssa-images', type=int,
                        default=dense.DGSSA_IMAGES,
                        help='scenes of tools/dgssa_init.py for the '
                        'DGSSA-Swin row (as dense_study.py\'s)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='overrides of every run\'s config (as '
                        'dense_study.py\'s, whose cache they key)')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    for name in ('jobs', 'dgssa_images'):
        if getattr(args, name) < 1:
            refuse(f'--{name.replace("_", "-")} must be >= 1, got '
                   f'{getattr(args, name)}')
    host = args.host_checkpoint or study.host_checkpoint(
        load_config(osp.join(REPO, dense.SWIN_HOST_CONFIG)), 0,
        args.work_dir)
    options = dict(args.cfg_options or {})
    tasks = dense.load_dense_tasks(osp.join(REPO, dense.DENSE_METHODS_FILE))
    rows = []
    for task in args.tasks:
        reference = next(r for r in tasks[task][1]
                         if r.reference is None and r.host == 'swin')
        calls = [(REPO, reference, host, s, args.work_dir, options)
                 for s in args.seeds]
        parallel_map(dense.finetuned_checkpoint, [
            c for c in calls
            if dense.finetuned_checkpoint(*c, train=False) is None
        ], args.jobs)
        finetuned = [dense.finetuned_checkpoint(*c) for c in calls]
        peers = [(r, tome_designs.peer_checkpoints(
            REPO, r, finetuned, args.work_dir, args.jobs, options,
            args.dgssa_images)) for r in tasks[task][1]
            if r.training_free and r.reference == reference.name]
        rows += tome_designs.design_rows(REPO, reference, finetuned,
                                         METRICS[task],
                                         tome_designs.DESIGN_SETTINGS,
                                         workers=args.jobs, options=options,
                                         peers=peers)
    os.makedirs(args.out, exist_ok=True)
    path = osp.join(args.out, 'tome_swin_designs.csv')
    tome_designs.write_design_csv(rows, path)
    tome_designs.plot_designs(rows, osp.splitext(path)[0] + '.png')
    print(tome_designs.design_markdown_table(
        tome_designs.read_design_csv(path)))
    print(f'wrote {path}')
    return rows


if __name__ == '__main__':
    main()
