"""Convert a host checkpoint into the weights of an mmvitaccel backbone.

Reads a checkpoint of the backbone's host model (Swin: official microsoft,
mmdet/mmseg or mmpretrain layouts; DeiT: official facebookresearch/timm or
mmpretrain layouts), maps it onto the backbone of CONFIG (e.g.
STViT-R-Swin-S, STViT-DeiT-S, DGSSA-DeiT-S) through the same path as
``init_cfg=dict(type='Pretrained')`` (the backbone's ``load_pretrained``:
its converter, then what the method makes of the host's weights, e.g.
DGSSA's static logits from the host's Q/K), prints which keys are new,
missing, unused or mismatched (and the conversions), and saves the backbone's state dict with a ``backbone.`` prefix, ready for ``load_from`` or
``init_cfg=dict(type='Pretrained', checkpoint=..., prefix='backbone.')``.

    python tools/model_converters/convert_checkpoint.py CONFIG SRC DST
"""
import argparse

import torch
from mmengine.registry import MODELS, DefaultScope, init_default_scope

import mmvitaccel
from mmvitaccel.models.utils import PretrainedMixin
from mmvitaccel.apis.launch import load_config_file, refuse

mmvitaccel.compat.apply()  # our tools' environment fixes


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
    if not isinstance(backbone, PretrainedMixin):
        refuse(f'{type(backbone).__name__} reads no host '
               'checkpoint: model.backbone of the config must be '
               'an mmvitaccel backbone')
    report = backbone.load_pretrained(args.src)
    for kind in ('new', 'missing', 'unused', 'mismatched'):
        print(f'{kind:>10}: {len(report[kind])}')
    for note in report.get('dropped', ()):
        print(f'   dropped: {note}')
    state = {f'backbone.{k}': v for k, v in backbone.state_dict().items()}
    torch.save(dict(state_dict=state, meta=dict(converted_from=args.src)),
               args.dst)
    print(f'loaded {len(report["loaded"])} tensors; saved {args.dst}')


if __name__ == '__main__':
    main()
