"""One mixed-precision training step of each method family, on the CPU.

The GPU recipes train under ``AmpOptimWrapper``, whose ``optim_context``
runs the data preprocessor and the forward pass (not the backward pass nor
the optimizer step) inside ``mmengine.runner.amp.autocast``. AMP path used
here and why: mmengine 0.10.7's ``AmpOptimWrapper`` refuses to be built
without CUDA/NPU/MLU/MUSA, and its ``autocast(device_type='cpu')`` accepts
only bfloat16 (both checked in :func:`test_mmengine_cpu_amp_limits`). So the
runner builds the model, its (plain, as the tiny overlay makes it without a
GPU) optimizer wrapper and dataloader, and the wrapper's ``optim_context``
gets the autocast that ``AmpOptimWrapper`` would add: bfloat16 through
``mmengine.runner.amp.autocast(device_type='cpu', dtype=torch.bfloat16)``,
float16 through ``torch.autocast('cpu', dtype=torch.float16)``. No loss
scaling: the gradients must come out finite without it.

Each family's runner is built once and takes one step per dtype, on the same
batch. Upstream code that cannot run a dtype on the CPU gets a shim
(:data:`SHIMS`), so that the step still covers this package's modules.
"""
import contextlib
import copy
import importlib
import math

import pytest
import torch
from torch import nn

from mmengine.runner.amp import autocast as mmengine_autocast

from .utils import (assert_updated, build_training, tiny_config,
                    train_one_batch)

#: low dtype -> the autocast context of a CPU step in it
AUTOCAST = {
    torch.bfloat16:
    lambda: mmengine_autocast(device_type='cpu', dtype=torch.bfloat16),
    torch.float16: lambda: torch.autocast('cpu', dtype=torch.float16),
}
BOTH = tuple(AUTOCAST)

#: method family -> (recipe, trained with its tiny model of
#: ``tests/utils.py``; the low dtypes it takes a step in)
FAMILIES = {
    'stvit_swin': ('configs/stvit_swin_t_in1k.py', BOTH),
    'stvit_r': ('configs/stvit_r_swin_s_in1k.py', BOTH),
    # the headline Cascade Mask R-CNN: bfloat16 only. A float16 step takes
    # minutes here: PyTorch's CPU float16 convolution backward is about 100x
    # slower than float32 (23 s for one 3x3 256-channel FPN conv), mmcv's CPU
    # float16 RoIAlign about 40x
    'stvit_r_cascade': ('configs/stvit_r_swin_s_coco.py', (torch.bfloat16, )),
    'stvit_deit': ('configs/stvit_deit_s_in1k.py', BOTH),
    'stvit_video': ('configs/stvit_swin_t_k400.py', BOTH),
    'sait': ('configs/sait_deit_s_v05_in1k.py', BOTH),
    'asvit': ('configs/asvit_deit_s_in1k.py', BOTH),
    'pruned_deit_upernet': ('configs/pruned_deit_s_upernet_ade20k.py', BOTH),
    'dgssa_swin': ('configs/dgssa_swin_t_in1k.py', BOTH),
    'glad_integrated_deit': ('configs/integrated_deit_s_in1k.py', BOTH),
    'hvit_deit': ('configs/hvit_deit_s_in1k.py', BOTH),
    'hvit_swin': ('configs/hvit_swin_t_in1k.py', BOTH),
    'hvit_pvtv2': ('configs/hvit_pvtv2_b1_tinyimagenet.py', BOTH),
}

def _torch_sdpa_fails(dtype):
    """Why torch's own SDPA cannot run a DeiT-sized training step in
    ``dtype`` here, or None. Under ``ATEN_CPU_CAPABILITY=default`` on a
    CPU with AVX-512, torch 2.14 picks the bfloat16 kernel that packs for
    AVX-512 and then refuses it ("pack_vnni2 is only supported when avx512
    is supported"), in plain ``F.scaled_dot_product_attention`` with 197
    tokens. A real CPU without AVX-512 never takes that kernel: it is an
    artefact of emulating one, so the steps in that dtype are left out."""
    q = torch.randn(1, 1, 197, 64, dtype=dtype, requires_grad=True)
    try:
        torch.nn.functional.scaled_dot_product_attention(q, q, q).sum() \
            .backward()
    except RuntimeError as e:
        return str(e)
    return None


#: dtype -> torch's own error, for the dtypes whose SDPA fails here
TORCH_SDPA_FAILS = {d: e for d in BOTH if (e := _torch_sdpa_fails(d))}

#: over about 10 s each on a 2-core CPU
SLOW = {'stvit_r_cascade', 'pruned_deit_upernet'}


def _mmcv_float32_boxes(monkeypatch, model, dtype):
    """mmcv 2.1's NMS kernels read float32 boxes only, and its RoIAlign has
    no bfloat16 kernel. (On CUDA, autocast runs the ``exp`` of the box
    decoding in float32, so the RPN's boxes reach NMS in float32; on the
    CPU it does not.) Both run in float32 here, RoIAlign's output cast back
    to the features' dtype."""
    from mmcv.ops import RoIAlign
    nms_module = importlib.import_module('mmcv.ops.nms')
    nms, roi_align = nms_module.nms, RoIAlign.forward
    # batched_nms looks ``nms`` up in its module by name
    monkeypatch.setattr(nms_module, 'nms',
                        lambda boxes, scores, *args, **kwargs: nms(
                            boxes.float(), scores.float(), *args, **kwargs))
    monkeypatch.setattr(RoIAlign, 'forward',
                        lambda self, x, rois: roi_align(
                            self, x.float(), rois.float()).to(x.dtype))


def _mmaction_float32_scores(monkeypatch, model, dtype):
    """mmaction2 1.2's ``BaseHead.loss_by_feat`` turns the class scores into
    a numpy array for its top-k accuracy, and numpy has no bfloat16."""
    if dtype is torch.bfloat16:
        head = model.cls_head
        loss_by_feat = head.loss_by_feat
        monkeypatch.setattr(head, 'loss_by_feat',
                            lambda scores, samples: loss_by_feat(
                                scores.float(), samples))


#: family -> shim(monkeypatch, model, dtype) applied for the step in dtype
SHIMS = {
    'stvit_r_cascade': _mmcv_float32_boxes,
    'stvit_video': _mmaction_float32_scores,
}


@contextlib.contextmanager
def cpu_amp(optim_wrapper, dtype):
    """Give ``optim_wrapper.optim_context`` the autocast of ``dtype``, as
    ``AmpOptimWrapper.optim_context`` adds it to the plain one."""
    plain = optim_wrapper.optim_context

    @contextlib.contextmanager
    def optim_context(model):
        with plain(model), AUTOCAST[dtype]():
            yield

    optim_wrapper.optim_context = optim_context
    try:
        yield
    finally:
        del optim_wrapper.optim_context


@contextlib.contextmanager
def linear_output_dtypes(module):
    """Collect the output dtype of every ``nn.Linear`` under ``module``:
    yields a dict, module name -> set of dtypes."""
    seen = {}
    handles = [
        m.register_forward_hook(
            lambda m, args, out, name=name: seen.setdefault(name, set()).add(
                out.dtype)) for name, m in module.named_modules()
        if isinstance(m, nn.Linear)
    ]
    assert handles, f'no nn.Linear in {type(module).__name__}'
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()


def test_mmengine_cpu_amp_limits():
    """Why the CPU steps below take the path they take: if mmengine learns
    CPU AMP, they can go through ``AmpOptimWrapper`` instead."""
    with pytest.raises(AssertionError, match='bfloat16'):
        with mmengine_autocast(device_type='cpu', dtype=torch.float16):
            pass
    if not torch.cuda.is_available():
        from mmengine.optim import AmpOptimWrapper
        optimizer = torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1)
        with pytest.raises(AssertionError, match='only available'):
            AmpOptimWrapper(optimizer=optimizer)


def _params(families):
    return [pytest.param(f, marks=pytest.mark.slow) if f in SLOW else f
            for f in families]


@pytest.mark.parametrize('family', _params(FAMILIES))
def test_mixed_precision_train_step(family, tmp_path, tiny_data_dir,
                                    monkeypatch):
    config, dtypes = FAMILIES[family]
    dtypes = [d for d in dtypes if d not in TORCH_SDPA_FAILS]
    if not dtypes:
        pytest.skip(f'torch\'s own SDPA fails here in {FAMILIES[family][1]}'
                    f' ({TORCH_SDPA_FAILS})')
    cfg = tiny_config(config, tmp_path / 'work', tiny_data_dir)
    runner, optim_wrapper, batch = build_training(cfg)
    model = runner.model
    for dtype in dtypes:
        updates = {}
        with monkeypatch.context() as patch:
            if family in SHIMS:
                SHIMS[family](patch, model, dtype)
            with cpu_amp(optim_wrapper, dtype), \
                    linear_output_dtypes(model.backbone) as seen:
                losses = train_one_batch(model, optim_wrapper,
                                         copy.deepcopy(batch), updates)
        # autocast was in effect in every linear layer of the backbone
        assert seen, f'{dtype}: no linear layer of the backbone ran'
        wrong = {n: d for n, d in seen.items() if d != {dtype}}
        assert not wrong, f'{dtype}: linear outputs not in {dtype}: {wrong}'
        assert losses
        losses = {k: float(v.detach()) for k, v in losses.items()}
        nonfinite = {k: v for k, v in losses.items() if not math.isfinite(v)}
        assert not nonfinite, f'{dtype}: non-finite losses {nonfinite}'
        assert_updated(updates)
        bad = [n for n, p in model.named_parameters()
               if not bool(torch.isfinite(p).all())]
        assert not bad, f'{dtype}: non-finite parameters after the step: {bad}'
