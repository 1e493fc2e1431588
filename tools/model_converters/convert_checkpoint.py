"""Convert a host checkpoint into the weights of an mmvitaccel backbone.

Reads a checkpoint of the backbone's host model (Swin: official microsoft,
mmdet/mmseg or mmpretrain layouts; DeiT: official facebookresearch/timm or
mmpretrain layouts), maps it onto the backbone of CONFIG (e.g.
STViT-R-Swin-S, STViT-DeiT-S) with the backbone's own
``host_state_dict``, prints which keys are new, missing, unused or
mismatched, and saves the backbone's state dict with a ``backbone.`` prefix, ready for ``load_from`` or
``init_cfg=dict(type='Pretrained', checkpoint=..., prefix='backbone.')``.

    python tools/model_converters/convert_checkpoint.py CONFIG SRC DST
"""
import argparse

import torch
from mmengine.registry import MODELS, DefaultScope, init_default_scope

import mmvitaccel  # noqa: F401
from mmvitaccel.models.utils import load_with_report
from mmvitaccel.apis.launch import load_config_file


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('config', help='config whose model.backbone to fill')
    parser.add_argument('src', help='host checkpoint (any supported layout)')
    parser.add_argument('dst', help='output checkpoint')
    return parser.parse_args()


def main():
    args = parse_args()
    cfg = load_config_file(args.config)
    backbone_cfg = cfg.model.backbone.copy()
    backbone_cfg.pop('init_cfg', None)
    scope = cfg.get('default_scope')
    init_default_scope(scope)
    with DefaultScope.overwrite_default_scope(scope):
        backbone = MODELS.build(backbone_cfg)
    report = load_with_report(backbone, backbone.host_state_dict(args.src),
                              getattr(backbone, 'new_parameter_prefixes', ()))
    for kind in ('new', 'missing', 'unused', 'mismatched'):
        print(f'{kind:>10}: {len(report[kind])}')
    state = {f'backbone.{k}': v for k, v in backbone.state_dict().items()}
    torch.save(dict(state_dict=state, meta=dict(converted_from=args.src)),
               args.dst)
    print(f'loaded {len(report["loaded"])} tensors; saved {args.dst}')


if __name__ == '__main__':
    main()
