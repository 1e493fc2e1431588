"""Shared helpers for the tests: tiny model overrides and one-step runs."""
import os.path as osp

import torch

from mmengine.config import Config
from mmengine.runner import Runner

import mmvitaccel  # noqa: F401
from mmvitaccel.tiny import tinyfy_config

from .tolerance import assert_rounding_close

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))

TINY_SWIN_DET = dict(embed_dims=32, depths=[1, 1, 2, 1], num_heads=[1, 2, 4, 8])
# 8 layers: STViT-DeiT's STGM at (4, 5) and two semantic layers after it
TINY_STVIT_DEIT = {
    'model.backbone.arch': dict(_delete_=True, embed_dims=64, num_layers=8, num_heads=2,
                                feedforward_channels=128),
    'model.head.in_channels': 64,
}

#: config -> options that make its model small enough for a CPU train step
#: (the full-size models are exercised under no_grad elsewhere)
TINY_MODELS = {
    'configs/_base_/swin_s_in1k.py': {
        'model.backbone.arch': dict(_delete_=True, embed_dims=32, depths=[1, 1, 2, 1],
                                    num_heads=[1, 2, 4, 8]),
        'model.head.in_channels': 256,
    },
    'configs/_base_/deit_s_in1k.py': {
        'model.backbone.arch': dict(_delete_=True, embed_dims=64, num_layers=2,
                                    num_heads=2, feedforward_channels=128),
        'model.head.in_channels': 64,
    },
    'configs/_base_/swin_s_cascade_mask_rcnn_3x_coco.py': {
        **{f'model.backbone.{k}': v for k, v in TINY_SWIN_DET.items()},
        'model.neck.in_channels': [32, 64, 128, 256],
    },
    'configs/stvit_r_swin_s_coco.py': {
        **{f'model.backbone.{k}': v for k, v in TINY_SWIN_DET.items()},
        'model.backbone.arch': None,
        'model.backbone.depths': [1, 1, 6, 1],  # one dumbbell unit
        'model.neck.in_channels': [32, 64, 128, 256],
    },
    'configs/stvit_r_swin_s_in1k.py': {
        **{f'model.backbone.{k}': v for k, v in TINY_SWIN_DET.items()},
        'model.backbone.arch': None,
        'model.backbone.depths': [1, 1, 6, 1],
        'model.head.in_channels': 256,
    },
    'configs/stvit_r_swin_b_in1k.py': {
        **{f'model.backbone.{k}': v for k, v in TINY_SWIN_DET.items()},
        'model.backbone.arch': None,
        'model.backbone.depths': [1, 1, 6, 1],
        'model.head.in_channels': 256,
    },
    'configs/stvit_swin_t_in1k.py': {
        **{f'model.backbone.{k}': v for k, v in TINY_SWIN_DET.items()},
        'model.backbone.arch': None,
        'model.backbone.depths': [1, 1, 4, 1],
        'model.backbone.stgm_index': 1,
        'model.head.in_channels': 256,
    },
    'configs/stvit_swin_s_in1k.py': {
        **{f'model.backbone.{k}': v for k, v in TINY_SWIN_DET.items()},
        'model.backbone.arch': None,
        'model.backbone.depths': [1, 1, 4, 1],
        'model.backbone.stgm_index': 1,
        'model.head.in_channels': 256,
    },
    'configs/stvit_swin_b_in1k.py': {
        **{f'model.backbone.{k}': v for k, v in TINY_SWIN_DET.items()},
        'model.backbone.arch': None,
        'model.backbone.depths': [1, 1, 4, 1],
        'model.backbone.stgm_index': 1,
        'model.head.in_channels': 256,
    },
    'configs/stvit_swin_t_k400.py': {
        'model.backbone.arch': dict(_delete_=True, embed_dims=32, depths=[1, 1, 4, 1],
                                    num_heads=[1, 2, 4, 8]),
        'model.backbone.stgm_index': 1,
        'model.cls_head.in_channels': 256,
    },
    'configs/stvit_swin_s_k400.py': {
        'model.backbone.arch': dict(_delete_=True, embed_dims=32, depths=[1, 1, 4, 1],
                                    num_heads=[1, 2, 4, 8]),
        'model.backbone.stgm_index': 1,
        'model.cls_head.in_channels': 256,
    },
    'configs/stvit_r_swin_b_coco.py': {
        **{f'model.backbone.{k}': v for k, v in TINY_SWIN_DET.items()},
        'model.backbone.arch': None,
        'model.backbone.depths': [1, 1, 6, 1],
        'model.neck.in_channels': [32, 64, 128, 256],
    },
    'configs/stvit_r_swin_s_upernet_ade20k.py': {
        **{f'model.backbone.{k}': v for k, v in TINY_SWIN_DET.items()},
        'model.backbone.depths': [1, 1, 6, 1],
        'model.decode_head.in_channels': [32, 64, 128, 256],
        'model.decode_head.channels': 64,
        'model.auxiliary_head.in_channels': 128,
        'model.auxiliary_head.channels': 32,
    },
    'configs/_base_/swin_b_cascade_mask_rcnn_3x_coco.py': {
        **{f'model.backbone.{k}': v for k, v in TINY_SWIN_DET.items()},
        'model.neck.in_channels': [32, 64, 128, 256],
    },
    'configs/_base_/swin_s_upernet_ade20k.py': {
        **{f'model.backbone.{k}': v for k, v in TINY_SWIN_DET.items()},
        'model.decode_head.in_channels': [32, 64, 128, 256],
        'model.decode_head.channels': 64,
        'model.auxiliary_head.in_channels': 128,
        'model.auxiliary_head.channels': 32,
    },
    'configs/stvit_deit_t_in1k.py': TINY_STVIT_DEIT,
    'configs/stvit_deit_s_in1k.py': TINY_STVIT_DEIT,
    'configs/stvit_deit_b_in1k.py': TINY_STVIT_DEIT,
    'configs/_base_/swin_t_k400.py': {
        'model.backbone.arch': dict(_delete_=True, embed_dims=32, depths=[1, 1, 2, 1],
                                    num_heads=[1, 2, 4, 8]),
        'model.cls_head.in_channels': 256,
    },
}

# hMHSA + cFFN hosts: even head counts where hMHSA goes
TINY_HVIT_DEIT = {
    'model.backbone.arch': dict(_delete_=True, embed_dims=64, num_layers=2,
                                num_heads=4, feedforward_channels=256),
    'model.head.in_channels': 64,
}
TINY_MODELS.update({
    'configs/hvit_pvtv2_b1_tinyimagenet.py': {
        'model.backbone.embed_dims': 16,
        'model.backbone.num_layers': [1, 1, 1, 1],
        'model.head.in_channels': 128,
    },
    'configs/hvit_deit_s_in1k.py': TINY_HVIT_DEIT,
    'configs/hvit_swin_t_in1k.py': {
        'model.backbone.arch': dict(_delete_=True, embed_dims=32, depths=[1, 1, 2, 1],
                                    num_heads=[2, 2, 4, 8]),
        'model.head.in_channels': 256,
    },
    # fine-tuning recipes: no ImageNet checkpoint here, crops at 1/4 size
    'configs/hvit_deit_s_cifar100_384.py': {
        **TINY_HVIT_DEIT, 'model.backbone.init_cfg': None, 'tiny.scale': 0.25,
    },
    'configs/hvit_deit_s_dogs_448.py': {
        **TINY_HVIT_DEIT, 'model.backbone.init_cfg': None, 'tiny.scale': 0.25,
    },
    **{f'configs/hvit_swin_t_{task}.py': {
        'model.backbone.arch': dict(_delete_=True, embed_dims=32,
                                    depths=[1, 1, 2, 1],
                                    num_heads=[2, 2, 4, 8]),
        'model.backbone.init_cfg': None,
        'model.head.in_channels': 256, 'tiny.scale': 0.25,
    } for task in ('cifar100_384', 'dogs_448')},
    **{f'configs/hvit_pvtv2_b1_{task}.py': {
        'model.backbone.embed_dims': 16,
        'model.backbone.num_layers': [1, 1, 1, 1],
        'model.backbone.init_cfg': None,
        'model.head.in_channels': 128, 'tiny.scale': 0.25,
    } for task in ('cifar100_384', 'dogs_448')},
})


# DGSSA/GLAD: 8 layers so that DGSSA 1-2 and GLAD 3/5/7 fit; 4 heads; no
# dynamic-guided checkpoint (the test makes its own), random teacher
TINY_INTEGRATED_DEIT = {
    'model.backbone.arch': dict(_delete_=True, embed_dims=64, num_layers=8,
                                num_heads=4, feedforward_channels=128),
    'model.backbone.init_cfg': None,
    'model.backbone.static_init': 'uniform',
    'model.teacher.arch': dict(_delete_=True, embed_dims=64, num_layers=8,
                               num_heads=4, feedforward_channels=128),
    'model.teacher_head.in_channels': 64,
    'model.head.in_channels': 64,
}
# Swin with DGSSA in 3 blocks, 1-3 (block 0 stays dynamic): the shifted
# block of stage 1 and both blocks of stage 2
TINY_DGSSA_SWIN = {
    **{f'model.backbone.{k}': v for k, v in TINY_SWIN_DET.items()},
    'model.backbone.arch': None,
    'model.backbone.depths': [2, 2, 2, 1],
    'model.backbone.static_blocks': 3,
    'model.backbone.init_cfg': None,
    'model.backbone.static_init': 'local',
}
TINY_MODELS.update({
    'configs/integrated_deit_t_in1k.py': TINY_INTEGRATED_DEIT,
    'configs/integrated_deit_s_in1k.py': TINY_INTEGRATED_DEIT,
    'configs/integrated_deit_b_in1k.py': TINY_INTEGRATED_DEIT,
    'configs/dgssa_swin_t_in1k.py': {**TINY_DGSSA_SWIN,
                                     'model.head.in_channels': 256},
    'configs/dgssa_swin_s_in1k.py': {**TINY_DGSSA_SWIN,
                                     'model.head.in_channels': 256},
    'configs/dgssa_swin_b_in1k.py': {**TINY_DGSSA_SWIN,
                                     'model.head.in_channels': 256},
    'configs/dgssa_swin_s_coco.py': {
        **TINY_DGSSA_SWIN,
        'model.neck.in_channels': [32, 64, 128, 256],
    },
    'configs/dgssa_swin_s_upernet_ade20k.py': {
        **TINY_DGSSA_SWIN,
        'model.decode_head.in_channels': [32, 64, 128, 256],
        'model.decode_head.channels': 64,
        'model.auxiliary_head.in_channels': 128,
        'model.auxiliary_head.channels': 32,
    },
})


def tiny_config(config, work_dir, data_root, **tiny_options):
    """Load ``config`` with a tiny model, on tiny data, at CPU scale."""
    cfg = Config.fromfile(osp.join(REPO, config))
    cfg.merge_from_dict(TINY_MODELS.get(config, {}))
    cfg.work_dir = str(work_dir)
    return tinyfy_config(cfg, data_root=str(data_root), **tiny_options)


def trainable_state(model):
    """Copies of the parameters that an optimizer may update.

    Returns:
        dict[str, Tensor]: name -> detached copy, ``requires_grad`` only.
    """
    return {n: p.detach().clone() for n, p in model.named_parameters()
            if p.requires_grad}


def parameter_updates(model, before):
    """Which trainable parameters differ from their copies in ``before``.

    Args:
        model (nn.Module): the model after some training.
        before (dict[str, Tensor]): :func:`trainable_state` of it before.

    Returns:
        dict[str, bool]: name -> changed.
    """
    params = dict(model.named_parameters())
    return {n: not torch.equal(params[n], p) for n, p in before.items()}


def assert_updated(updates, share=0.75):
    """Training changed at least ``share`` of the trainable parameters, and
    some in every trainable top-level module (backbone, neck, heads...).

    Not all of them: a residual branch that drop path dropped for the whole
    batch gets a zero gradient (its biases and norms, free of weight decay,
    stay as they were), and so do the FPN levels of a detector whose anchors
    all cross the border of a tiny image.

    Args:
        updates (dict[str, bool]): :func:`parameter_updates`.
        share (float): smallest accepted share of changed parameters.
    """
    unchanged = sorted(n for n, c in updates.items() if not c)
    assert updates, 'nothing to train'
    for module in sorted({n.split('.')[0] for n in updates}):
        assert any(c for n, c in updates.items()
                   if n.split('.')[0] == module), \
            f'no parameter of {module} changed'
    assert len(unchanged) <= (1 - share) * len(updates), \
        f'{len(unchanged)} of {len(updates)} unchanged: {unchanged}'


def build_training(cfg):
    """What the runner's train loop works with: the runner of ``cfg``, its
    optimizer wrapper and the first training batch.

    Returns:
        tuple: (Runner, OptimWrapper, batch).
    """
    runner = Runner.from_cfg(cfg)
    optim_wrapper = runner.build_optim_wrapper(cfg.optim_wrapper)
    train_loader = runner.build_dataloader(cfg.train_dataloader)
    return runner, optim_wrapper, next(iter(train_loader))


def train_one_batch(model, optim_wrapper, batch, updates=None):
    """One ``model.train_step``, as the runner's train loop does it. Every
    trainable parameter must get a gradient, and a finite one (checked as
    it is accumulated, before the optimizer step).

    Args:
        model (BaseModel): the runner's model.
        optim_wrapper (OptimWrapper): its optimizer wrapper.
        batch (dict): a batch of its training dataloader.
        updates (dict, optional): filled by :func:`parameter_updates` of the
            optimizer step (trainable parameter name -> changed).

    Returns:
        dict: the loss tensors of the step.
    """
    model.train()
    before = trainable_state(model)
    assert before, 'nothing to train'
    finite = {}
    handles = [p.register_post_accumulate_grad_hook(
        lambda p, name=name: finite.__setitem__(
            name, bool(torch.isfinite(p.grad).all())))
        for name, p in model.named_parameters() if p.requires_grad]
    try:
        losses = model.train_step(batch, optim_wrapper)
    finally:
        for h in handles:
            h.remove()
    # DDP (find_unused_parameters=False, mmengine's default) needs a
    # gradient for every trainable parameter in every step
    unused = [n for n in before if n not in finite]
    assert not unused, f'trainable parameters without a gradient: {unused}'
    bad = [n for n, ok in finite.items() if not ok]
    assert not bad, f'non-finite gradients: {bad}'
    if updates is not None:
        updates.update(parameter_updates(model, before))
    return losses


def train_and_predict_one_batch(cfg, updates=None):
    """One optimizer step (:func:`train_one_batch`) and one prediction, as
    the runner would do them.

    Args:
        cfg (Config): a runner config (e.g. :func:`tiny_config`).
        updates (dict, optional): see :func:`train_one_batch`.

    Returns:
        tuple: (dict of loss tensors, list of predictions, metrics dict).
    """
    runner, optim_wrapper, batch = build_training(cfg)
    model = runner.model
    losses = train_one_batch(model, optim_wrapper, batch, updates)
    model.eval()
    test_loader = runner.build_dataloader(cfg.test_dataloader)
    evaluator = runner.build_evaluator(cfg.test_evaluator)
    evaluator.dataset_meta = test_loader.dataset.metainfo
    batch = next(iter(test_loader))
    with torch.no_grad():  # as the runner's test loop does
        preds = model.test_step(batch)
    evaluator.process(preds, batch)
    metrics = evaluator.evaluate(len(preds))
    return losses, preds, metrics


def assert_padding_invariant(model, x, module, monkeypatch, first=0):
    """Run ``model(x)`` twice: with ``module.pad_to_multiple`` as it is, and
    with the padding it adds filled with large noise. Outputs from index
    ``first`` on must agree (valid positions never see the padding)."""
    model.eval()
    with torch.no_grad():
        clean = model(x)
    pad = module.pad_to_multiple
    calls = []

    def noisy_pad(t, multiple):
        calls.append(multiple)
        padded, valid = pad(t, multiple)
        assert not bool(valid.all()), 'the input needs padding'
        padded = padded.clone()
        padded[:, ~valid] = 10 * torch.randn_like(padded[:, ~valid])
        return padded, valid

    monkeypatch.setattr(module, 'pad_to_multiple', noisy_pad)
    with torch.no_grad():
        noisy = model(x)
    # a patch of a module the model no longer calls would prove nothing
    assert calls, f'{module.__name__}.pad_to_multiple was never called'
    # bit-exact: same shapes, same kernels, and the padding's weight in
    # the valid positions' sums is 0 (or < 1e-40 after a -100 logit)
    for a, b in zip(clean[first:], noisy[first:]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)

# token-pruned DeiT (SaiT, AS-ViT): 4 layers, pruning before layer 1 (SaiT)
# or before layers 1, 2, 3 (AS-ViT)
TINY_PRUNED_DEIT = {
    'model.backbone.arch': dict(_delete_=True, embed_dims=64, num_layers=4, num_heads=2,
                                feedforward_channels=128),
    'model.head.in_channels': 64,
}
# a teacher of the tiny student's width (the kept-token KL compares features)
TINY_DEIT_TEACHER = dict(
    _delete_=True,
    config=dict(type='ImageClassifier',
                backbone=dict(type='VisionTransformer', img_size=224, patch_size=16,
                              arch=dict(embed_dims=64, num_layers=2, num_heads=2,
                                        feedforward_channels=128)),
                head=dict(type='VisionTransformerClsHead', num_classes=1000,
                          in_channels=64)))
TINY_MODELS.update({
    'configs/sait_deit_s_m07_in1k.py': {**TINY_PRUNED_DEIT, 'model.backbone.prune_before': (1, )},
    'configs/sait_deit_s_v05_in1k.py': {**TINY_PRUNED_DEIT, 'model.backbone.prune_before': (1, )},
    'configs/asvit_deit_s_in1k.py': {**TINY_PRUNED_DEIT, 'model.backbone.prune_before': (1, 2, 3),
                                     'model.teacher': TINY_DEIT_TEACHER},
    'configs/asvit_deit_t_in1k.py': {**TINY_PRUNED_DEIT, 'model.backbone.prune_before': (1, 2, 3),
                                     'model.teacher': TINY_DEIT_TEACHER},
})
TINY_MODELS['configs/tome_deit_s_in1k.py'] = {**TINY_PRUNED_DEIT,
                                             'model.backbone.r': 8}
TINY_MODELS['configs/tome_swin_t_coco.py'] = {
    **{f'model.backbone.{k}': v for k, v in TINY_SWIN_DET.items()},
    'model.backbone.r': 8,
    'model.neck.in_channels': [32, 64, 128, 256],
}
TINY_MODELS['configs/pruned_deit_s_upernet_ade20k.py'] = {
    'model.backbone.arch': dict(_delete_=True, embed_dims=64, num_layers=4, num_heads=2,
                                feedforward_channels=128),
    'model.backbone.out_indices': (0, 1, 2, 3),
    'model.backbone.prune_before': (1, ),
    'model.neck.embed_dims': 64,
    'model.decode_head.in_channels': [64, 64, 64, 64],
    'model.decode_head.channels': 64,
    'model.auxiliary_head.in_channels': 64,
    'model.auxiliary_head.channels': 32,
}


# variants of the recipes above (paper variants, fixed-density and authors'
# layout configs): the tiny model of the recipe they inherit
for variant, parent in {
        'configs/asvit_deit_s_b050_in1k.py': 'configs/asvit_deit_s_in1k.py',
        'configs/asvit_deit_s_r065_in1k.py': 'configs/sait_deit_s_v05_in1k.py',
        'configs/asvit_deit_s_r044_in1k.py': 'configs/sait_deit_s_v05_in1k.py',
        'configs/asvit_deit_t_r065_in1k.py': 'configs/sait_deit_s_v05_in1k.py',
        'configs/sait_deit_s_d042_in1k.py': 'configs/sait_deit_s_v05_in1k.py',
        'configs/sait_deit_s_v05_dino_in1k.py': 'configs/sait_deit_s_m07_in1k.py',
        'configs/sait_deit_s_m07_deit_teacher_in1k.py':
        'configs/sait_deit_s_m07_in1k.py',
        'configs/stvit_deit_s_25tokens_in1k.py': 'configs/stvit_deit_s_in1k.py',
        'configs/stvit_deit_s_36tokens_in1k.py': 'configs/stvit_deit_s_in1k.py',
        'configs/stvit_deit_s_49tokens_in1k.py': 'configs/stvit_deit_s_in1k.py',
        'configs/stvit_r_swin_s_authors_in1k.py':
        'configs/stvit_r_swin_s_in1k.py',
        'configs/stvit_r_swin_b_authors_in1k.py':
        'configs/stvit_r_swin_b_in1k.py',
}.items():
    TINY_MODELS[variant] = TINY_MODELS[parent]
# the STViT-R ablations of the paper's Table 9: the tiny COCO model with room
# for their layouts (two units to reuse tokens across; Swin, STGM, semantic
# and two recovery blocks in a stage of 6)
TINY_MODELS.update({
    'configs/stvit_r_swin_s_nodumbbell_coco.py': {
        **TINY_MODELS['configs/stvit_r_swin_s_coco.py'],
        'model.backbone.stgm_index': 1,
    },
    'configs/stvit_r_swin_s_reuse_coco.py': {
        **TINY_MODELS['configs/stvit_r_swin_s_coco.py'],
        'model.backbone.depths': [1, 1, 12, 1],
    },
})


def random_readout(outputs, seed=0):
    """A scalar of the outputs whose gradient reaches every output element:
    a fixed random projection ``sum(out * R)``, ``R`` standard normal from
    ``seed``. (``sum()``/``mean()`` of a normalised output, or the sum of
    squares of a LayerNorm output, is nearly constant: its gradient is zero
    or rounding noise.)

    Args:
        outputs (Tensor | Sequence[Tensor]): model outputs, any shapes.
        seed (int): seed of the projection.

    Returns:
        Tensor: a scalar.
    """
    if isinstance(outputs, torch.Tensor):
        outputs = (outputs, )
    g = torch.Generator().manual_seed(seed)
    return sum((o * torch.randn(o.shape, generator=g, dtype=o.dtype)).sum()
               for o in outputs)


#: below this, a gradient is no evidence that a parameter is used: rounding
#: noise reaches about 1e-6 in these tiny models, real gradients under
#: :func:`random_readout` are above 1e-3
GRAD_FLOOR = 1e-4


def assert_clear_gradients(named_parameters, floor=GRAD_FLOOR):
    """Every parameter has a gradient whose largest entry exceeds ``floor``.

    Args:
        named_parameters (Iterable[tuple[str, Tensor]]): non-empty.
        floor (float): smallest accepted ``max |grad|``.
    """
    named_parameters = list(named_parameters)
    assert named_parameters, 'no parameters to check'
    for name, p in named_parameters:
        assert p.grad is not None, f'{name}: no gradient'
        largest = float(p.grad.abs().max())
        assert largest > floor, f'{name}: max |grad| {largest:.1e}'


def small_digits_run(cfg, work_dir, train=16, test=8, batch_size=8):
    """Shrink a digits-study config (``mmvitaccel.DigitsCanvas``) in place
    to ``train`` training and ``test`` test canvases in batches of
    ``batch_size``, writing to ``work_dir``; returns ``cfg``."""
    cfg.work_dir = str(work_dir)
    cfg.train_dataloader.batch_size = batch_size
    cfg.test_dataloader.batch_size = batch_size
    cfg.train_dataloader.dataset.max_samples = train
    cfg.test_dataloader.dataset.max_samples = test
    return cfg


def assert_twin_matches(twin, model, x, expected, terms):
    """Load ``model``'s weights into ``twin`` (another form of it), and
    check that its eval outputs on ``x`` match ``expected``, output by
    output, within the rounding of sums of ``terms`` terms (the chain
    through the model, :func:`tests.tolerance.rounding_tol`; scale the
    largest output, or 1). Compare in float64: the forms round otherwise."""
    twin.load_state_dict(model.state_dict())
    twin.eval()
    with torch.no_grad():
        outs = twin(x)
    assert len(outs) == len(expected)
    for i, (a, b) in enumerate(zip(outs, expected)):
        assert_rounding_close(a, b, terms, msg=f'output {i}')


def tool_module(name):
    """A tool of ``tools/`` as a module (``tools/test.py`` would import as
    the standard library's ``test`` package)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        f'mmvitaccel_tool_{name}', osp.join(REPO, 'tools', f'{name}.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def user_checkpoint(tmp_path, name, text, scope):
    """A user's config file ``name.py`` holding ``text``, and a checkpoint
    of its whole model (built in ``scope``, seed 0) in the toolbox's
    layout.

    Returns:
        tuple[str, str, dict]: the config, the checkpoint, the state dict.
    """
    from mmengine.registry import MODELS, DefaultScope, init_default_scope
    config = tmp_path / f'{name}.py'
    config.write_text(text)
    cfg = Config.fromfile(str(config))
    init_default_scope(scope)
    with DefaultScope.overwrite_default_scope(scope):
        torch.manual_seed(0)
        state = MODELS.build(cfg.model).state_dict()
    checkpoint = str(tmp_path / f'{name}.pth')
    torch.save(dict(state_dict=state, meta=dict()), checkpoint)
    return str(config), checkpoint, state


def assert_tools_test_loads_everything(config, checkpoint, state, method,
                                       tmp_path, data_root, ignore=()):
    """``tools/accelerate.py CONFIG --method METHOD``, then ``tools/test.py
    NEW_CONFIG CHECKPOINT --tiny``: the runner's checkpoint report shows
    every tensor of ``state`` loaded (but names ending in ``ignore``),
    nothing new, missing, unused or mismatched."""
    from mmvitaccel.engine.checkpoint_check_hook import CheckpointCheckHook
    out = str(tmp_path / f'{method}.py')
    tool_module('accelerate').main([config, '--method', method, '--out', out])
    runner = tool_module('test').main([
        out, checkpoint, '--tiny', '--work-dir', str(tmp_path / 'work'),
        '--cfg-options', f'tiny.data_root={data_root}'])
    hook = next(h for h in runner.hooks
                if isinstance(h, CheckpointCheckHook))
    report = hook.report
    kept = [k for k in report['loaded'] if not ignore or
            not k.endswith(tuple(ignore))]
    assert sorted(kept) == sorted(k for k in state if not ignore or
                                  not k.endswith(tuple(ignore)))
    for kind in ('new', 'missing', 'unused', 'mismatched'):
        assert not report[kind], (kind, report[kind])
