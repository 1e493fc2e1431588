# Copyright (c) mmvitaccel contributors. All rights reserved.
"""Our ToMe against the authors' timm patch, on the same DeiT-S weights:
whether every patch ends in the same merged token and the logits agree, and
the speed ratio of each against its own unpatched host, timed interleaved at
batch 1 and 32 (``docs/tome.md``).

It needs ``timm`` and the authors' ``tome`` package importable (their
repository's ``tome/`` folder on ``PYTHONPATH``); neither ships with us.

Example::

    PYTHONPATH=/path/to/ToMe python tools/analysis/tome_reference.py
"""
import argparse
import copy
import statistics
import sys
import time

import torch


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="ToMe: ours against the authors' timm patch")
    parser.add_argument('--r', type=int, default=13)
    parser.add_argument('--rounds', type=int, nargs=2, default=(40, 8),
                        metavar=('B1', 'B32'),
                        help='interleaved rounds at batch 1 and 32 (0: skip)')
    parser.add_argument('--threads', type=int, default=2)
    return parser.parse_args(argv)


def build(r):
    """The four models: timm's DeiT-S, the authors' patch of it, the same
    weights in mmpretrain's DeiT-S and in ours (seeded random weights)."""
    import timm
    import tome
    from mmengine.registry import MODELS

    import mmvitaccel  # noqa: F401  registers our models
    from mmvitaccel.models.utils.checkpoint import deit_converter
    torch.manual_seed(0)
    t_host = timm.create_model('deit_small_patch16_224', pretrained=False)
    t_tome = copy.deepcopy(t_host)
    tome.patch.timm(t_tome, trace_source=True)
    t_tome.r = r
    state = deit_converter({k: v for k, v in t_host.state_dict().items()
                            if not k.startswith('head.')})
    ours = []
    for backbone in (dict(type='mmpretrain.VisionTransformer'),
                     dict(type='mmvitaccel.ToMeVisionTransformer', r=r,
                          trace_source=True)):
        model = MODELS.build(dict(backbone, arch='deit-small', img_size=224,
                                  patch_size=16))
        model.load_state_dict(state, strict=True)
        ours.append(model)
    models = dict(timm_host=t_host, timm_tome=t_tome, mm_host=ours[0],
                  mm_tome=ours[1])
    for model in models.values():
        model.eval()
    return models


def agreement(models):
    """Same merges and logits on a batch of 4 (features for ours: the
    class token before timm's head, compared through that head)."""
    x = torch.randn(4, 3, 224, 224)
    t = models['timm_tome']
    with torch.inference_mode():
        logits = t(x)
        ours = t.head(models['mm_tome'](x)[0])
    source = t._tome_info['source']  # (B, T', 197): which tokens each holds
    same = torch.equal(source.argmax(1), models['mm_tome'].source_index)
    print(f'same merges: {same}; max |logit diff| '
          f'{float((logits - ours).abs().max()):.2e}; same top-1: '
          f'{bool((logits.argmax(1) == ours.argmax(1)).all())}')


def speed(models, batch, rounds):
    """Interleaved img/s and each patch's median per-round ratio to its
    host."""
    x = torch.randn(batch, 3, 224, 224)
    iters = 5 if batch == 1 else 1
    rates = {k: [] for k in models}
    with torch.inference_mode():
        for model in models.values():
            model(x)
            model(x)
        for _ in range(rounds):
            for name, model in models.items():
                start = time.perf_counter()
                for _ in range(iters):
                    model(x)
                rates[name].append(iters * batch /
                                   (time.perf_counter() - start))

    def ratio(a, b):
        return statistics.median(p / q for p, q in zip(rates[a], rates[b]))

    shown = ', '.join(f'{k} {statistics.median(v):.2f}'
                      for k, v in rates.items())
    print(f'batch {batch}: img/s {shown}; speed ratio authors '
          f'{ratio("timm_tome", "timm_host"):.3f}, ours '
          f'{ratio("mm_tome", "mm_host"):.3f}')


def main(argv=None):
    args = parse_args(argv)
    try:
        import timm  # noqa: F401
        import tome  # noqa: F401
    except ImportError as err:
        print(f'tome_reference.py: error: needs timm and the authors\' '
              f'tome package importable ({err.name} is not)',
              file=sys.stderr)
        sys.exit(2)
    torch.set_num_threads(args.threads)
    models = build(args.r)
    agreement(models)
    for batch, rounds in zip((1, 32), args.rounds):
        if rounds:
            speed(models, batch, rounds)


if __name__ == '__main__':
    main()
