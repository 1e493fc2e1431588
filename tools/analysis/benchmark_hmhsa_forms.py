"""Interleaved timing of the hMHSA forms per shape.

For each layer shape of the three hosts (DeiT-S, PVTv2-b1, Swin-T at 224²)
and each batch, the forms of ``hallucinated_attention`` (explicit, fused,
stacked) run on the same random ``Q^, K^, V`` in alternation (``--rounds``
rounds), and the median time of each is printed with the form that
``resolve_hmhsa_form``'s ``'auto'`` rule picks; the rule is chosen from this
table. Forward calls without gradients (inference, where IHH runs as sparse
products), or with ``--grad`` the training forward (gradients on, IHH as
convolutions).

Example::

    python tools/analysis/benchmark_hmhsa_forms.py --batch 1 32 --threads 2
"""
import argparse
import statistics
import time

import torch

from mmvitaccel.ops import (AttentionHallucination, hallucinated_attention,
                            resolve_hmhsa_form, window_mask)

#: (name, images -> attention batch, N_q, key grid, extra keys, h, d, mask)
SHAPES = [
    ('DeiT-S', 1, 197, (14, 14), 1, 6, 64, False),
    ('PVTv2-b1 s2', 1, 784, (7, 7), 0, 2, 64, False),
    ('PVTv2-b1 s4', 1, 49, (7, 7), 0, 8, 64, False),
    # Swin: every other block shifts its windows (masked), stage 4 never
    ('Swin-T s2', 16, 49, (7, 7), 0, 6, 32, False),
    ('Swin-T s2, shifted', 16, 49, (7, 7), 0, 6, 32, True),
    ('Swin-T s3', 4, 49, (7, 7), 0, 12, 32, False),
    ('Swin-T s3, shifted', 4, 49, (7, 7), 0, 12, 32, True),
    ('Swin-T s4', 1, 49, (7, 7), 0, 24, 32, False),
]


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--batch', type=int, nargs='+', default=[1, 32])
    parser.add_argument('--rounds', type=int, default=20)
    parser.add_argument('--iters', type=int, default=5)
    parser.add_argument('--threads', type=int, default=None)
    parser.add_argument(
        '--additive-mask',
        action='store_true',
        help="give the shifted windows upstream's additive mask (-100 where "
        'forbidden) instead of the allowed/forbidden mask that '
        'HallucinatedWindowMSA passes')
    parser.add_argument(
        '--grad',
        action='store_true',
        help='time the forward with gradients on (the training path)')
    return parser.parse_args()


def inputs(batch, per_image, nq, grid, extra, h, d, mask, additive=False):
    """Random ``Q^, K^, V``, the hallucination and a Swin-like mask."""
    B, g, nk = batch * per_image, h // 2, extra + grid[0] * grid[1]
    q = torch.randn(B, g, nq, d)
    k = torch.randn(B, g, nk, d)
    v = torch.randn(B, h, nk, d)
    m = None
    if mask:  # two regions per window, as a shifted window at the border
        region = (torch.arange(nk) >= nk // 2).long()
        # allowed/forbidden, as HallucinatedWindowMSA passes Swin's mask
        m = region[:, None] == region[None]
        if additive:
            m = torch.zeros(m.shape).masked_fill(~m, -100.)
        m = window_mask(m[None].expand(per_image, -1, -1), B)
    return q, k, v, AttentionHallucination(h), m


def main():
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f'threads={torch.get_num_threads()}, '
          f'{"gradients on" if args.grad else "inference"}')
    print('| layer | batch | N_q | N_k | g | d | explicit ms | fused ms | '
          'stacked ms | auto |')
    print('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |')
    for batch in args.batch:
        for name, per, nq, grid, extra, h, d, mask in SHAPES:
            q, k, v, hal, m = inputs(batch, per, nq, grid, extra, h, d, mask,
                                     args.additive_mask)
            times = {'explicit': [], 'fused': [], 'stacked': []}
            with torch.set_grad_enabled(args.grad):
                for _ in range(2):  # warm-up
                    for form in times:
                        hallucinated_attention(q, k, v, hal, grid, extra,
                                               mask=m, form=form)
                for _ in range(args.rounds):
                    for form in times:
                        t0 = time.perf_counter()
                        for _ in range(args.iters):
                            hallucinated_attention(q, k, v, hal, grid, extra,
                                                   mask=m, form=form)
                        times[form].append(
                            (time.perf_counter() - t0) / args.iters)
            ms = ' | '.join(f'{statistics.median(t) * 1e3:.3f}'
                            for t in times.values())
            auto = resolve_hmhsa_form('auto', h // 2, m is not None)
            print(f'| {name} | {batch} | {nq} | {k.shape[2]} | {h // 2} | '
                  f'{d} | {ms} | {auto} |', flush=True)


if __name__ == '__main__':
    main()
