"""Evaluating the study's models on the test split: the host, its
training-free pruning references (:func:`reference_rows`), the trained
methods (:func:`trained_rows`), and their cost (:func:`measure`: parameters,
FLOPs per image averaged over the test split where the token count depends
on the image, and the speed ratio to the host, timed interleaved).
"""
import copy
import os.path as osp
import statistics
from typing import Callable, Dict, List, Optional, Sequence

import torch

from projects.digits_study.study.training import (StudyMethod,
                                                  method_checkpoint,
                                                  setting_label, train_record)

__all__ = [
    'HOST_CONFIG', 'REFERENCE_SCORERS', 'build_study_model', 'measure',
    'pruned_host', 'reference_rows', 'summarise', 'test_inputs',
    'test_split_flops', 'top1', 'trained_rows'
]

#: The host recipe, relative to the repository root.
HOST_CONFIG = 'configs/study/digits_deit_host.py'


#: Training-free scorers: SaiT's TIS, EViT's class attention, random.
REFERENCE_SCORERS = ('tis', 'cls', 'random')


def build_study_model(cfg, checkpoint, cfg_options=None):
    """A model of a config with its weights, in eval mode."""
    from mmvitaccel.apis.harness import build_model
    cfg = copy.deepcopy(cfg)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    return build_model(cfg, checkpoint)


def pruned_host(cfg, checkpoint, scorer, density, prune_before=(3, )):
    """The trained host with training-free token pruning: the host config
    converted by the switch (:func:`~mmvitaccel.switch.accelerate_config`,
    method ``tis``, or ``cls`` for that scorer), the path a user takes.

    Before layer ``l`` (0-based, ``prune_before``) the patch tokens are
    scored from layer ``l - 1``'s attention and the ``round(rho (N + 1))
    - 1`` best are kept (SaiT's value selector); the others are dropped.
    ``density=1`` is the host exactly.

    Args:
        cfg (mmengine.Config): the host config (an mmpretrain
            ``VisionTransformer`` backbone).
        checkpoint (str): the host's weights.
        scorer (str): ``'tis'``, ``'cls'``, ``'random'`` (or ``'asvit'``).
        density (float): ``rho`` in ``(0, 1]``.
        prune_before (Sequence[int]): the pruning layers.

    Returns:
        nn.Module: the classifier, in eval mode.

    Raises:
        ValueError: the host is not a ViT (the switch's message).
    """
    from mmvitaccel.switch.accelerate import accelerate_config
    pruned = accelerate_config(
        cfg, 'cls' if scorer == 'cls' else 'tis', scorer=scorer,
        selector='value', density=density,
        prune_before=tuple(prune_before), test_execution='drop')
    return build_study_model(pruned, checkpoint)


def test_inputs(cfg, num_images=None, batch_size=128):
    """The test split, preprocessed: ``(inputs, labels)`` batches.

    Args:
        cfg (mmengine.Config): a study config.
        num_images (int, optional): the first images only (default: all).
        batch_size (int): images per batch.

    Returns:
        list[tuple[Tensor, Tensor]]: ``(B, 3, H, W)`` and ``(B, )``.
    """
    from mmengine.registry import MODELS, DefaultScope

    from mmvitaccel.apis.harness import real_data_batches
    if num_images is None:
        from mmengine.registry import DATASETS
        with DefaultScope.overwrite_default_scope(cfg.get('default_scope')):
            num_images = len(DATASETS.build(cfg.test_dataloader.dataset))
    batches = real_data_batches(cfg, num_images, batch_size)
    pre_cfg = dict(type='ClsDataPreprocessor', **cfg.data_preprocessor)
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope')):
        pre = MODELS.build(pre_cfg)
    out = []
    for batch in batches:
        data = pre(batch, False)
        labels = torch.cat([s.gt_label for s in data['data_samples']])
        out.append((data['inputs'], labels))
    return out


def top1(model, inputs, seed=0):
    """Top-1 accuracy of a classifier on preprocessed batches, with torch's
    generator seeded first (the random scorer draws from it).

    Args:
        model (nn.Module): an mmpretrain classifier (``mode='tensor'``
            returns the logits).
        inputs (list[tuple[Tensor, Tensor]]): from :func:`test_inputs`.
        seed (int): the evaluation seed.

    Returns:
        float: the share of correct predictions.
    """
    torch.manual_seed(seed)
    correct = total = 0
    with torch.no_grad():
        for images, labels in inputs:
            logits = model(images, mode='tensor')
            correct += int((logits.argmax(dim=-1) == labels).sum())
            total += len(labels)
    return correct / total


def summarise(values):
    """``(mean, std)`` of per-seed accuracies (std 0 for one seed)."""
    values = list(values)
    std = statistics.stdev(values) if len(values) > 1 else 0.
    return statistics.fmean(values), std


def reference_rows(cfg, checkpoint, inputs, densities, seeds,
                   scorers=REFERENCE_SCORERS, prune_before=(3, ),
                   progress=None):
    """Training-free pruning of the trained host, per scorer and density.

    Args:
        cfg (mmengine.Config): the host config.
        checkpoint (str): the host's weights.
        inputs (list): test batches (:func:`test_inputs`).
        densities (Sequence[float]): the ``rho`` values.
        seeds (Sequence[int]): evaluation seeds of the ``'random'``
            scorer; the host and the deterministic scorers are evaluated
            once (``num_seeds`` 1, std 0).
        scorers (Sequence[str]): scorers to evaluate.
        prune_before (Sequence[int]): the pruning layers.
        progress (Callable[[str], None], optional): called after each
            model is evaluated.

    Returns:
        list[dict]: ``method, setting, top1_mean, top1_std, num_seeds,
        per_seed`` and the model factory ``build`` (for :func:`measure`);
        the first row is the host.
    """
    host = build_study_model(cfg, checkpoint)
    accs = [top1(host, inputs, seeds[0])]  # deterministic: once
    rows = [dict(method='host', setting='dense',
                 build=lambda: build_study_model(cfg, checkpoint),
                 per_seed=accs)]
    if progress:
        progress('host')
    for scorer in scorers:
        for rho in densities:
            model = pruned_host(cfg, checkpoint, scorer, rho, prune_before)
            # only the random scorer depends on the seed
            runs = seeds if scorer == 'random' else seeds[:1]
            accs = [top1(model, inputs, s) for s in runs]
            rows.append(dict(
                method=f'{scorer} pruning', setting=f'rho={rho:g}',
                build=(lambda sc=scorer, r=rho: pruned_host(
                    cfg, checkpoint, sc, r, prune_before)),
                per_seed=accs))
            if progress:
                progress(f'{scorer} rho={rho:g}')
    for row in rows:
        row['top1_mean'], row['top1_std'] = summarise(row['per_seed'])
        row['num_seeds'] = len(row['per_seed'])
    return rows


def trained_rows(methods: Dict[str, StudyMethod], host_ckpt, inputs,
                 seeds: Sequence[int], cache_dir: str, repo: str,
                 progress: Optional[Callable[[str], None]] = None
                 ) -> List[dict]:
    """Rows of trained methods: each trained per seed from the host (or
    taken from the cache), evaluated at each of its settings.

    Returns:
        list[dict]: as :func:`reference_rows`'s.
    """
    from mmvitaccel.apis.harness import load_config
    rows = []
    for name, method in methods.items():
        runs = {s: method_checkpoint(method, host_ckpt, s, cache_dir, repo)
                for s in seeds}
        cfg = load_config(osp.join(repo, method.config),
                          copy.deepcopy(method.cfg_options))

        def build(seed, options, cfg=cfg, runs=runs):
            ckpt, test_options = runs[seed]
            return build_study_model(cfg, ckpt, {**test_options, **options})

        searched = next(iter(runs.values()))[1] if method.search else {}
        searched = {k: v for k, v in searched.items()
                    if k not in (method.fold or {}).get('test_options', {})}
        settings = method.settings or {method.setting or 'default': {}}
        for label, options in settings.items():
            label = setting_label(label, searched)
            accs = [top1(build(s, options), inputs, s) for s in seeds]
            mean, std = summarise(accs)
            norms = [train_record(runs[s][0]).get('max_grad_norm')
                     for s in seeds]
            rows.append(dict(
                method=name, setting=label, per_seed=accs,
                max_grad_norm=None if None in norms else max(norms),
                top1_mean=mean, top1_std=std, num_seeds=len(seeds),
                build=(lambda o=options, b=build: b(seeds[0], o)),
                seed_builds=[(lambda s=s, o=options, b=build: b(s, o))
                             for s in seeds]))
            if progress:
                progress(f'{name} {label}')
    return rows


def test_split_flops(model, images):
    """FLOPs per image, averaged over ``images``, each counted alone.

    A model whose token count depends on the image (a backbone that records
    per-image ``token_counts``, ``(B, num_layers)``, e.g. AS-ViT's
    thresholds or SaiT's mass selector) costs a different amount per
    image, so the first image is not its cost. The images are run one at a
    time and grouped by their per-layer token counts; the one counter
    (:func:`~mmvitaccel.analysis.flops.count_flops`, whose count depends on
    the shapes alone) counts one image of each group, weighted by the
    group's size. A model without such records, or with one group, costs
    its first image's count.

    Args:
        model (nn.Module): an mmpretrain classifier in eval mode.
        images (Tensor): ``(n, 3, H, W)`` the test split.

    Returns:
        tuple[float, bool]: the mean FLOPs per image, and whether they
        depend on the image.
    """
    from mmvitaccel.analysis.flops import count_flops

    def flops(i):
        return count_flops(model, images[i:i + 1], dict(mode='tensor')).total

    backbone = getattr(model, 'backbone', None)
    if not hasattr(backbone, 'token_counts'):
        return float(flops(0)), False
    groups = {}
    with torch.no_grad():
        for i in range(len(images)):
            model(images[i:i + 1], mode='tensor')
            counts = backbone.token_counts  # (B, L), or ToMe's list
            key = tuple(counts[0].tolist() if torch.is_tensor(counts)
                        else counts)
            groups.setdefault(key, []).append(i)
    if len(groups) == 1:
        return float(flops(0)), False
    total = sum(len(group) * flops(group[0]) for group in groups.values())
    return total / len(images), True


def measure(rows, inputs, rounds=10, batch_size=32, progress=False,
            iters_per_round=5):
    """Add ``params``, ``mflops`` (per image), ``flops_ratio`` and the
    speed ratio to the host (median and quartiles over interleaved rounds,
    each a block of ``iters_per_round`` forwards of one batch) to each row;
    the first row is the baseline.

    ``mflops`` is :func:`test_split_flops` over every test image: for a
    model whose cost depends on the image, the mean over the test split
    and over the row's seeds (``seed_builds``: each seed learns its own
    thresholds); otherwise any image's count. ``flops_per_image`` says
    which (``'test mean'`` or ``'fixed'``).

    Args:
        rows (list[dict]): rows with a ``build`` factory (and optionally
            ``seed_builds``, one factory per seed).
        inputs (list): test batches; the first ``batch_size`` images are
            timed.
        rounds (int): interleaved timing rounds.
        batch_size (int): images per timed call.
        iters_per_round (int): calls timed as one block per model and
            round (one forward of a small model lasts tens of milliseconds,
            within the scheduler's noise; a block of several evens it).
        progress (bool): a tqdm bar over the rounds.

    Returns:
        list[dict]: the rows, completed.
    """
    from mmvitaccel.analysis.flops import count_params
    from mmvitaccel.analysis.timing import interleaved_benchmark
    every = torch.cat([x for x, _ in inputs])
    images = every[:batch_size]
    models = {}
    for i, row in enumerate(rows):
        model = row['build']()
        row['params'] = count_params(model)
        flops, varies = test_split_flops(model, every)
        if varies and row.get('seed_builds'):
            per_seed = [test_split_flops(build(), every)[0]
                        for build in row['seed_builds']]
            flops = sum(per_seed) / len(per_seed)
        row['mflops'] = flops / 1e6
        row['flops_per_image'] = 'test mean' if varies else 'fixed'
        models[i] = model

    def call(model):
        def run():
            with torch.no_grad():
                model(images, mode='tensor')
        return run

    names = {i: f'{r["method"]} {r["setting"]}' for i, r in enumerate(rows)}
    result = interleaved_benchmark(
        {names[i]: call(m) for i, m in models.items()}, rounds=rounds,
        iters_per_round=iters_per_round, warmup=2,
        items_per_call=len(images),
        baseline=names[0], progress=progress)
    for i, row in enumerate(rows):
        row['flops_ratio'] = row['mflops'] / rows[0]['mflops']
        if i == 0:
            row['speed_ratio'] = row['speed_ratio_q1'] = \
                row['speed_ratio_q3'] = 1.
        else:
            stats = result.speedup[names[i]]
            row['speed_ratio'], row['speed_ratio_q1'], \
                row['speed_ratio_q3'] = stats.median, stats.q1, stats.q3
    return rows
