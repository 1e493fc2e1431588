"""Deployment (mmvitaccel/apis/deploy.py, tools/deployment/export_onnx.py):
ONNX export and onnxruntime parity, torch.compile(fullgraph=True) parity, on
the tiny model of every accelerated family; the clear error for what cannot
be exported."""
import os.path as osp

import pytest
import torch

from mmvitaccel.apis.deploy import (check_exportable, compile_parity,
                                    deploy_module, export_onnx, input_dims,
                                    max_abs_diff, onnx_parity)
from mmvitaccel.apis.harness import build_model, load_config
from mmvitaccel.apis.runtimes import runtime_callable
from mmvitaccel.apis.torch_version import (DEPLOY_TORCH, require_torch,
                                           torch_release)
from mmvitaccel.ops import is_capturing, mask_or_none, pad_to_multiple

from .tolerance import rounding_tol
from .utils import REPO, TINY_MODELS

#: ONNX export and torch.compile deployment: refused by name before torch
#: 2.5 (test_deployment_refuses_an_old_torch_by_name)
needs_deploy_torch = pytest.mark.skipif(
    torch_release() < DEPLOY_TORCH,
    reason='deployment (ONNX export, torch.compile) needs torch >= 2.5 and '
    'refuses older ones by name')

pytest.importorskip('onnxruntime')
pytest.importorskip('onnxscript')

#: family -> (config, config whose tiny model it takes)
FAMILIES = {
    'stvit_r_swin': ('configs/stvit_r_swin_s_in1k.py', None),
    'stvit_r_swin_fpn': ('configs/stvit_r_swin_s_coco.py', None),
    'stvit_swin': ('configs/stvit_swin_t_in1k.py', None),
    'stvit_deit': ('configs/stvit_deit_s_in1k.py', None),
    'stvit_swin3d': ('configs/stvit_swin_t_k400.py', None),
    'integrated_deit': ('configs/integrated_deit_s_in1k.py', None),
    'dgssa_swin': ('configs/dgssa_swin_t_in1k.py', None),
    'hvit_deit_deploy': ('configs/hvit_deploy/deit_s_hmhsa_cffn.py',
                         'configs/hvit_deit_s_in1k.py'),
    'hvit_swin_deploy': ('configs/hvit_deploy/swin_t_hmhsa_cffn.py',
                         'configs/hvit_swin_t_in1k.py'),
    'hvit_pvtv2_deploy': ('configs/hvit_deploy/pvtv2_b1_hmhsa_cffn.py',
                          'configs/hvit_pvtv2_b1_tinyimagenet.py'),
    'pruned_deit_value': ('configs/sait_deit_s_v05_in1k.py', None),
    'pruned_deit_mass': ('configs/sait_deit_s_m07_in1k.py', None),
    'pruned_deit_threshold': ('configs/asvit_deit_s_in1k.py', None),
    'tome_deit': ('configs/tome_deit_s_in1k.py', None),
    'tome_swin': ('configs/tome_swin_t_coco.py', None),
}
#: accumulation length of the tiny models' longest chain of dependent sums
#: (a dozen layers of widths up to 256, their FFNs and attentions): under
#: 1e4 terms, so onnxruntime's other operator order and fusions move a
#: float32 output by at most ``rounding_tol(float32, 1e4, scale)``
TINY_TERMS = 10_000


def onnx_tol(result):
    """The rounding bound of one :func:`onnx_parity` result."""
    return rounding_tol(torch.float32, TINY_TERMS,
                        max(1., result['max_abs_ref']))


#: the two input sizes; the second is not square and makes the Swin
#: families pad their windows
SHAPES = [(224, 224), (160, 96)]
#: the video family's two clip sizes ``(T, H, W)``: the second pads the
#: temporal and spatial windows
VIDEO = {'stvit_swin3d'}
VIDEO_SHAPES = [(8, 64, 64), (6, 96, 64)]


#: families built for one patch grid (STViT-DeiT's intra/inter pooling,
#: DGSSA's static attention): a model per input size (``img_size``), the
#: second size larger (GLAD's token counts are for 197 tokens or more)
FIXED_GRID = {
    'stvit_deit': ('model.backbone.img_size', ),
    # the (left out) teacher is checked against the student's grid
    'integrated_deit': ('model.backbone.img_size', 'model.teacher.img_size'),
}
FIXED_GRID_SHAPES = [(224, 224), (256, 224)]


def modules_at_sizes(family):
    """``(module, shape)`` for both :data:`SHAPES`: one model, or one per
    size for the :data:`FIXED_GRID` families."""
    if family not in FIXED_GRID:
        module = tiny_module(family)
        return [(module, shape)
                for shape in (VIDEO_SHAPES if family in VIDEO else SHAPES)]
    return [(tiny_module(family, **{k: shape for k in FIXED_GRID[family]}),
             shape) for shape in FIXED_GRID_SHAPES]


def tiny_module(family, batch_size=1, **options):
    config, tiny = FAMILIES[family]
    cfg = load_config(osp.join(REPO, config),
                      {**TINY_MODELS[tiny or config], **options})
    torch.manual_seed(0)
    return deploy_module(build_model(cfg), cfg, batch_size)


@needs_deploy_torch
@pytest.mark.slow
@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_onnx_export_matches_pytorch(family, tmp_path):
    """Exported at two sizes and run in onnxruntime: the same outputs as
    PyTorch. No graph cleans NaN from an attention map (``IsNaN``): key
    masks reach SDPA in additive form under capture (``ops.sdpa_mask``),
    since the exporter follows a bool-masked SDPA with an ``IsNaN``/``Where``
    pass over the whole map."""
    for module, shape in modules_at_sizes(family):
        out = str(tmp_path / f'{family}_{shape[0]}.onnx')
        export_onnx(module, shape, out)
        r, = onnx_parity(module, out, [shape])
        assert r['max_abs_diff'] <= onnx_tol(r), r
        assert 'IsNaN' not in onnx_op_types(out), family


def onnx_op_types(onnx_file):
    """The operator types of an ONNX file, its local functions' included."""
    import onnx
    model = onnx.load(onnx_file, load_external_data=False)
    return {n.op_type for g in [model.graph, *model.functions]
            for n in g.node}


#: families whose forward has no size branch: exported with dynamic H, W
DYNAMIC = {'hvit_pvtv2_deploy'}


@needs_deploy_torch
@pytest.mark.slow
@pytest.mark.parametrize('family', sorted(DYNAMIC))
def test_dynamic_size_export_matches_pytorch(family, tmp_path):
    """One file with symbolic height and width, run by onnxruntime at three
    sizes (square, smaller and not square, larger): PyTorch's outputs."""
    out = str(tmp_path / f'{family}.onnx')
    module = tiny_module(family)
    export_onnx(module, SHAPES[0], out, dynamic=True)
    assert all(isinstance(d, str) for d in input_dims(out)[2:])
    for r in onnx_parity(module, out, [SHAPES[0], SHAPES[1], (192, 256)]):
        assert r['max_abs_diff'] <= onnx_tol(r), r


@pytest.mark.parametrize('family', sorted(set(FAMILIES) - DYNAMIC))
def test_dynamic_size_is_refused_before_capture(family, tmp_path,
                                                monkeypatch):
    """Every other family branches on the input size (upstream patch
    padding, position-embedding resize, window crops; STViT-R's region
    form): asked for dynamic H and W, the export refuses at once, naming the
    branches, without starting a capture (which, for STViT-R-Swin, did not
    end)."""
    import mmvitaccel.apis.deploy as deploy

    def no_capture(*args, **kwargs):
        raise AssertionError('the capture started')

    monkeypatch.setattr(deploy, 'export_program', no_capture)
    module = tiny_module(family) if family not in FIXED_GRID else \
        tiny_module(family, **{k: (224, 224) for k in FIXED_GRID[family]})
    shape = VIDEO_SHAPES[0] if family in VIDEO else SHAPES[0]
    with pytest.raises(ValueError, match='without --dynamic') as e:
        export_onnx(module, shape, str(tmp_path / 'x.onnx'), dynamic=True)
    assert 'branches on the input size in ' in str(e.value)


@needs_deploy_torch
def test_dynamic_size_guard_outside_the_table(tmp_path):
    """A size branch that no table knows of is still refused with
    torch.export's guard and the way out."""

    class Branching(torch.nn.Module):

        def forward(self, x):
            return x * 2 if x.shape[-1] > 100 else x - 1

    with pytest.raises(ValueError, match='without --dynamic'):
        export_onnx(Branching().eval(), (64, 64), str(tmp_path / 'x.onnx'),
                    dynamic=True)


@needs_deploy_torch
@pytest.mark.slow
def test_export_tool_check(tmp_path, capsys):
    """tools/deployment/export_onnx.py --check on a small PVTv2 hMHSA +
    cFFN deploy model: exit code 0 and the printed difference."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        'export_onnx', osp.join(REPO, 'tools/deployment/export_onnx.py'))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    out = str(tmp_path / 'pvt.onnx')
    code = tool.main([
        osp.join(REPO, 'configs/hvit_deploy/pvtv2_b1_hmhsa_cffn.py'),
        '--shape', '96', '96', '--out', out, '--check', '--cfg-options',
        'model.backbone.embed_dims=16', 'model.backbone.num_layers=[1,1,1,1]',
        'model.head.in_channels=128'
    ])
    assert code == 0
    text = capsys.readouterr().out
    assert 'max abs diff' in text and 'check passed' in text
    assert osp.getsize(out) > 0


@needs_deploy_torch
@pytest.mark.slow
def test_export_tool_video_recognizer(tmp_path, capsys):
    """export_onnx.py on a video config (--shape T H W): the recognizer
    with its head, and PyTorch still right after the export. mmaction2
    caches its shifted-window mask by size (``lru_cache``); the mask made
    while tracing is fake, and without ``clear_shape_caches`` the eager
    reference of ``--check`` fails on it."""
    from mmaction.models.backbones.swin import compute_mask
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        'export_onnx', osp.join(REPO, 'tools/deployment/export_onnx.py'))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    compute_mask.cache_clear()
    code = tool.main([
        osp.join(REPO, 'configs/stvit_swin_t_k400.py'), '--tiny',
        '--shape', '4', '32', '32', '--out', str(tmp_path / 'v.onnx'),
        '--check'
    ])
    assert code == 0
    text = capsys.readouterr().out
    assert 'check passed' in text and 'outputs [(1, 400)]' in text


@needs_deploy_torch
@pytest.mark.slow
@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_compile_fullgraph_matches_eager(family):
    """torch.compile(fullgraph=True) (no graph break) at two sizes: the
    same outputs as eager mode. Dynamo's ``eager`` backend runs the captured
    graph as it is: ``fullgraph=True`` fails on any break whatever the
    backend, and the export tests already run the functionalised graph of
    ``torch.export`` (``aot_eager`` cost 3 to 5 times more here)."""
    for module, shape in modules_at_sizes(family):
        r, = compile_parity(module, [shape], backend='eager')
        # the same kernels, except where eager inference takes its caches
        # (hMHSA's stacked q/k/v, the sparse IHH operator) and the graph
        # the training-form products: float32 sums of <= 4 layers of C <=
        # 128 and 9 taps, n < 1000, at the outputs' scale (bit-exact for
        # the other families)
        with torch.no_grad():
            scale = max(float(o.abs().max())
                        for o in module(torch.randn(1, 3, *shape)))
        assert r['max_abs_diff'] <= rounding_tol(torch.float32, 1000,
                                                 scale), (r, scale)


def test_batch_mean_pruning_is_refused():
    """Batch-mean token counts have no graph form at batch > 1: the error
    names the option; batch 1 and batch_mode='pad' are accepted."""
    opts = {'model.backbone.batch_mode': 'mean'}
    with pytest.raises(ValueError, match="batch_mode='pad'"):
        tiny_module('pruned_deit_value', batch_size=2, **opts)
    tiny_module('pruned_deit_value', batch_size=1, **opts)
    tiny_module('pruned_deit_value', batch_size=2)


def test_capture_takes_the_general_branch(monkeypatch):
    """Under graph capture an all-valid mask is kept (no host read) and
    the padding mask is built without in-place writes; eager mode keeps
    its shortcut."""
    valid = torch.ones(3, 4, dtype=torch.bool)
    assert not is_capturing()
    assert mask_or_none(valid) is None
    if hasattr(torch.compiler, 'is_compiling'):
        monkeypatch.setattr(torch.compiler, 'is_compiling', lambda: True)
    else:  # torch < 2.3
        from torch import _dynamo
        monkeypatch.setattr(_dynamo, 'is_compiling', lambda: True)
    assert is_capturing()
    assert mask_or_none(valid) is valid
    x, valid = pad_to_multiple(torch.randn(1, 5, 3, 2), 4)
    assert x.shape == (1, 8, 4, 2)
    assert valid.tolist() == [[True] * 3 + [False]] * 5 + \
        [[False] * 4] * 3


@needs_deploy_torch
def test_compile_runtime_takes_upstream_numpy_drop_rates(monkeypatch):
    """``runtime_callable(..., 'compile')`` on a plain mmpretrain ViT, whose
    drop-path rates are numpy scalars (``np.linspace``): one graph
    (``fullgraph=True``), the eager outputs. Without the conversion Dynamo
    breaks the graph on ``if drop_prob == 0.``."""
    import numpy as np
    from mmpretrain.models import VisionTransformer
    vit = VisionTransformer(
        arch=dict(embed_dims=32, num_layers=2, num_heads=2,
                  feedforward_channels=64),
        img_size=32, patch_size=16, drop_path_rate=0.1)
    vit.eval()  # (its train() returns nothing)
    assert any(isinstance(v, np.generic) for m in vit.modules()
               for v in vars(m).values())
    real = torch.compile
    monkeypatch.setattr(torch, 'compile', lambda m, **kw: real(
        m, **{**kw, 'backend': 'eager'}))
    torch.compiler.reset()
    x = torch.randn(1, 3, 32, 32)
    got = runtime_callable(vit, x, 'compile')()
    with torch.no_grad():
        ref = vit(x)
    assert max_abs_diff(ref, got) == 0


@needs_deploy_torch
@pytest.mark.slow
@pytest.mark.parametrize('runtime', ['compile', 'onnxruntime'])
def test_benchmark_runtime(runtime, monkeypatch):
    """tools/analysis/benchmark.py --runtime: candidate and baseline both
    run in the runtime, interleaved; the result records it."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        'benchmark', osp.join(REPO, 'tools/analysis/benchmark.py'))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    if runtime == 'compile':  # no C++ compiler needed for the plumbing
        real = torch.compile
        monkeypatch.setattr(torch, 'compile', lambda m, **kw: real(
            m, **{**kw, 'backend': 'aot_eager'}))
    result = tool.main([
        osp.join(REPO, 'configs/hvit_deploy/pvtv2_b1_hmhsa_cffn.py'),
        '--baseline',
        osp.join(REPO, 'configs/hvit_deploy/pvtv2_b1_upstream.py'),
        '--shape', '64', '64', '--rounds', '2', '--iters-per-round', '1',
        '--warmup', '1', '--batch-size', '1', '--runtime', runtime,
        '--cfg-options',
        'model.backbone.embed_dims=16', 'model.backbone.num_layers=[1,1,1,1]',
        'model.head.in_channels=128'
    ])
    (result, ) = result
    assert result.settings['runtime'] == runtime
    assert len(result.throughput['candidate']) == 2


@needs_deploy_torch
@pytest.mark.slow
def test_profile_tool_sums_kernel_time_by_operator(capsys):
    """tools/analysis/profile_ops.py --runtime onnxruntime: onnxruntime's
    kernel time of the exported backbone, by operator type, shares summing
    to one; the patch embedding's convolutions and the attention's
    products are there."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        'profile_ops', osp.join(REPO, 'tools/analysis/profile_ops.py'))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    result = tool.main([
        osp.join(REPO, 'configs/hvit_deploy/pvtv2_b1_hmhsa_cffn.py'),
        '--runtime', 'onnxruntime',
        '--shape', '64', '64', '--runs', '2', '--threads', '1',
        '--cfg-options', 'model.backbone.embed_dims=16',
        'model.backbone.num_layers=[1,1,1,1]', 'model.head.in_channels=128'
    ])
    ops = {op: seconds for op, seconds, _ in result['ops']}
    assert 'Conv' in ops and ({'MatMul', 'Gemm', 'FusedMatMul'} & set(ops))
    assert all(seconds > 0 for seconds in ops.values())
    # float64 shares of one total: their divisions and their sum round
    assert abs(sum(share for _, _, share in result['ops']) - 1) <= \
        rounding_tol(torch.float64, len(result['ops']) + 1, 1.)
    assert result['seconds_per_call'] > 0
    assert 'kernel time by operator type over 2 calls' in \
        capsys.readouterr().out


def _export_tool():
    """tools/deployment/export_onnx.py as a module."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        'export_onnx', osp.join(REPO, 'tools/deployment/export_onnx.py'))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_deployment_refuses_an_old_torch_by_name():
    """Before torch 2.5 the deployment entry points refuse with the version
    they need and the one found, before any capture."""
    with pytest.raises(RuntimeError, match=r'needs torch >= 2\.5; this is '
                       r'torch 2\.1\.2\+cu121'):
        require_torch(DEPLOY_TORCH, 'ONNX export', version='2.1.2+cu121')
    require_torch(DEPLOY_TORCH, 'ONNX export', version='2.14.1')
    if torch_release() >= DEPLOY_TORCH:
        return
    with pytest.raises(SystemExit) as refused:  # the tool: one line, 2
        _export_tool().main(['configs/hvit_deit_s_in1k.py', '--shape', '64',
                             '64', '--out', 'never.onnx'])
    assert refused.value.code == 2
    from mmvitaccel.apis.deploy import compile_parity, export_program
    module = torch.nn.Linear(2, 2).eval()
    with pytest.raises(RuntimeError, match=r'needs torch >= 2\.5'):
        export_program(module, torch.randn(1, 2))
    with pytest.raises(RuntimeError, match=r'needs torch >= 2\.5'):
        compile_parity(module, [(2, 2)])
