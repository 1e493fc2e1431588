"""Fold the cFFN training branches of a trained checkpoint (deploy form).

Builds the model of CONFIG in its training form, loads CKPT (a checkpoint
written by ``tools/train.py``), folds every cFFN factor's ``r`` (1x1 conv
+ BN) branches into one linear layer (``switch_to_deploy``), checks on a
random batch that the eval-mode outputs did not change, and saves the
deploy weights to OUT. Evaluate them with the same config in deploy form::

    python tools/reparameterize.py CONFIG work_dirs/x/epoch_300.pth deploy.pth
    python tools/test.py CONFIG deploy.pth --cfg-options model.backbone.deploy=True

hMHSA has nothing to fold; its layers are copied as they are.
"""
import argparse
import os.path as osp
import sys

import torch
from mmengine.config import DictAction
from mmengine.registry import MODELS, DefaultScope, init_default_scope
from mmengine.runner.checkpoint import _load_checkpoint_to_model

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
sys.path.insert(0, REPO)

import mmvitaccel  # noqa: E402
from mmvitaccel.models.hvit import HViTHostMixin  # noqa: E402
from mmvitaccel.ops import RepLinear, switch_to_deploy  # noqa: E402
from mmvitaccel.apis.launch import load_config_file  # noqa: E402

mmvitaccel.compat.apply()  # our tools' environment fixes


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('config', help='config of the trained model')
    parser.add_argument('checkpoint', help='trained (training-form) weights')
    parser.add_argument('out', help='where to write the deploy checkpoint')
    parser.add_argument(
        '--check-shape',
        type=int,
        nargs='+',
        default=[2, 3, 224, 224],
        help='input shape of the output check (B C H W)')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override config options, as tools/train.py')
    return parser.parse_args(argv)


def build(cfg):
    """The whole model of ``cfg`` (classifier, detector, ...)."""
    model_cfg = cfg.model.copy()
    scope = cfg.get('default_scope')
    init_default_scope(scope)
    with DefaultScope.overwrite_default_scope(scope):
        return MODELS.build(model_cfg)


def reparameterize(model):
    """Fold ``model`` in place; returns the number of folded branch sets."""
    count = sum(isinstance(m, RepLinear) and not m.deploy
                for m in model.modules())
    switch_to_deploy(model)
    # our hosts also record the folded form (their ``deploy`` flag)
    for module in model.modules():
        if isinstance(module, HViTHostMixin):
            module.deploy = True
    return count


def main(argv=None):
    args = parse_args(argv)
    cfg = load_config_file(args.config, args.cfg_options)
    if cfg.model.get('backbone', {}).get('deploy', False):
        raise ValueError('CONFIG must build the training form '
                         '(model.backbone.deploy=False): CKPT holds the '
                         'training branches')
    model = build(cfg)
    # one load, of plain data and the mmengine classes mmvitaccel.compat
    # allows (a checkpoint that would run code when unpickled is refused,
    # on every torch); its meta goes into the deploy one
    ckpt = mmvitaccel.compat.load_checkpoint_safely(args.checkpoint)
    _load_checkpoint_to_model(model, ckpt, strict=True)
    model.eval()
    x = torch.randn(*args.check_shape)
    backbone = getattr(model, 'backbone', model)
    with torch.no_grad():
        before = backbone(x)
        folded = reparameterize(model)
        after = backbone(x)
    diff = max((a - b).abs().max().item() for a, b in zip(before, after))
    print(f'folded {folded} cFFN branch sets; max |output difference| on a '
          f'random {tuple(x.shape)} batch: {diff:.3g}')
    meta = dict(ckpt.get('meta') or {} if isinstance(ckpt, dict) else {})
    meta.update(reparameterized_from=args.checkpoint, deploy=True)
    torch.save(dict(state_dict=model.state_dict(), meta=meta), args.out)
    print(f'saved {args.out}; evaluate it with --cfg-options '
          f'model.backbone.deploy=True')
    return diff


if __name__ == '__main__':
    main()
