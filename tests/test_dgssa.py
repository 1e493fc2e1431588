"""DGSSA/GLAD backbones (Integrated-DeiT, DGSSA-Swin) and the GLAD token
distillation classifier."""

import pytest
import torch
from mmdet.models.backbones import SwinTransformer
from mmdet.models.backbones.swin import ShiftWindowMSA
from mmpretrain.models import VisionTransformer

import mmvitaccel  # noqa: F401
from mmvitaccel.models import (DGSSASwinTransformer, DGSSAVisionTransformer,
                               GLADDistillClassifier)
from mmvitaccel.models.dgssa import (StaticShiftWindowMSA, StaticWindowMSA,
                                     relative_position_bias, vit_attention,
                                     window_attention)
from mmvitaccel.models.dgssa import static_attention as static_module
from mmvitaccel.ops import architecture_flops, layer_flops
from mmvitaccel.analysis.flops import count_flops

from .tolerance import (assert_equal, assert_rounding_close, rounding_tol,
                        summed_magnitude)
from .utils import (assert_clear_gradients, assert_padding_invariant,
                    random_readout)

TINY = dict(embed_dims=64, num_layers=8, num_heads=4, feedforward_channels=128)
SWIN = dict(embed_dims=32, depths=(2, 2, 2, 1), num_heads=(1, 2, 4, 8))

#: float64 forwards of TINY (17 tokens) that take other paths agree within
#: rounding: the longest chain of dependent sums is the patch embedding
#: (3 x 16 x 16 = 768), per layer the LayerNorms' means and variances
#: (2 x 2 x 64), qkv (64), the logits (2 x 16), the softmax's maximum and
#: sum and A V over 17 keys (3 x 17), proj (64), fc1 (64) and fc2 (128,
#: twice for GELU's slope): < 1000, eight layers and the final norm:
#: n = 10000
TINY_TERMS = 10_000


def _perturbed(module):
    with torch.no_grad():  # not the init values: a load must copy them
        for p in module.parameters():
            p.add_(0.1 * torch.randn_like(p))
    module.eval()
    return module


def _upstream_vit(**kwargs):
    torch.manual_seed(0)
    vit = VisionTransformer(arch=TINY, img_size=64, patch_size=16, **kwargs)
    vit.init_weights()
    return _perturbed(vit)


def _ours_vit(vit=None, **kwargs):
    kwargs = dict(dict(static_layers=(1, 2), static_init='uniform',
                       glad_layers=(3, 5, 7), glad_tokens=(13, 9, 5)),
                  **kwargs)
    ours = DGSSAVisionTransformer(arch=TINY, img_size=64, patch_size=16,
                                  **kwargs)
    ours.init_weights()
    if vit is not None:
        state, _, _ = ours.convert_host_state_dict(vit.state_dict())
        missing, unused = ours.load_state_dict(state, strict=False)
        assert all(k.startswith('glads.') or k.endswith('static_logits')
                   for k in missing), missing
        assert not unused
    ours.eval()
    return ours


# --- Integrated-DeiT ----------------------------------------------------------


def test_static_layer_from_its_own_attention_reproduces_the_layer():
    # one image: its attention is the mean attention of the "data set".
    # float64, with the logits log(A) of the float64 map itself
    # (attention_to_logits rounds to float32 and clamps at 1e-6, which
    # test_ops_dgssa checks): softmax(log A) = A within rounding
    vit = _upstream_vit()
    ours = _ours_vit(vit, static_layers=(1, ), glad_layers=(),
                     glad_tokens=()).double()
    vit.double()
    x = torch.randn(1, 3, 64, 64, dtype=torch.float64)
    inputs = {}
    vit.layers[1].register_forward_hook(
        lambda m, args, out: inputs.update(x=args[0]))
    with torch.no_grad(), summed_magnitude(vit) as sums:
        ref = vit(x)
        attn = vit_attention(vit.layers[1].attn,
                             vit.layers[1].ln1(inputs['x']))
    with torch.no_grad():
        ours.layers[1].attn.static_logits.copy_(attn[0].log())
        out = ours(x)
    assert_rounding_close(out[0], ref[0], TINY_TERMS, max(sums))
    # and it is a different function: another image differs, by far more
    # than rounding (not a rounding comparison)
    y = torch.randn(1, 3, 64, 64, dtype=torch.float64)
    with torch.no_grad():
        assert not torch.allclose(ours(y)[0], vit(y)[0], atol=1e-3)


def test_no_static_no_glad_is_upstream():
    vit = _upstream_vit()
    ours = _ours_vit(vit, static_layers=(), glad_layers=(), glad_tokens=())
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():  # the same modules in the same order: bit-exact
        assert torch.equal(ours(x)[0], vit(x)[0])


def test_glad_shapes_and_class_token():
    ours = _ours_vit(out_type='raw')
    assert ours.tokens == [17, 17, 17, 13, 13, 9, 9, 5]
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        (out, ), glads = ours.forward_with_glad(x)
    assert out.shape == (2, 5, 64)
    assert [g.shape for g in glads] == [(2, 12, 64), (2, 8, 64), (2, 4, 64)]
    # GLAD l maps the patch tokens of the previous count only
    assert [tuple(g.weight.shape) for g in ours.glads] == [(12, 16), (8, 12),
                                                          (4, 8)]
    assert [tuple(g.pos_embed.shape) for g in ours.glads] == [(1, 12, 64),
                                                             (1, 8, 64),
                                                             (1, 4, 64)]
    cls = DGSSAVisionTransformer(arch=TINY, img_size=64, patch_size=16,
                                 static_init='uniform',
                                 glad_tokens=(13, 9, 5))
    assert cls(x)[0].shape == (2, 64)  # cls_token out
    # static maps and GLAD matrices fix the token count: other sizes fail
    with pytest.raises(ValueError, match='built for the'):
        cls(torch.randn(1, 3, 80, 64))


def test_gradients_reach_static_logits_and_glad():
    ours = _ours_vit()
    ours.train()
    random_readout(ours(torch.randn(2, 3, 64, 64))).backward()
    assert_clear_gradients(
        [(f'layers.{i}.attn.static_logits', ours.layers[i].attn.static_logits)
         for i in (1, 2)] +
        [(f'glads.{k}.{n}', p) for k, g in enumerate(ours.glads)
         for n, p in g.named_parameters()])


def test_convert_checkpoint_tool_converts_as_init_cfg_does(
        tmp_path, monkeypatch, capsys):
    """tools/model_converters/convert_checkpoint.py goes through the
    backbone's own loading (load_pretrained): a DeiT checkpoint becomes
    DGSSA's V rows and static logits, exactly as init_cfg=Pretrained gives,
    where reading the host layout alone would leave qkv unused."""
    import importlib.util
    import os.path as osp
    import sys
    repo = osp.dirname(osp.dirname(osp.abspath(__file__)))
    vit = _upstream_vit()
    src = tmp_path / 'deit.pth'
    torch.save(dict(state_dict={f'backbone.{k}': v
                                for k, v in vit.state_dict().items()}), src)
    backbone = dict(arch=TINY, img_size=64, patch_size=16,
                    static_init='local', glad_tokens=(13, 9, 5))
    config = tmp_path / 'tiny_dgssa.py'
    config.write_text(
        'default_scope = "mmpretrain"\n'
        'custom_imports = dict(imports=["mmvitaccel"])\n'
        'model = dict(type="ImageClassifier", backbone=dict('
        f'type="mmvitaccel.DGSSAVisionTransformer", **{backbone!r}))\n')
    spec = importlib.util.spec_from_file_location(
        'convert_checkpoint',
        osp.join(repo, 'tools', 'model_converters', 'convert_checkpoint.py'))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    monkeypatch.setattr(sys, 'argv', [
        'convert_checkpoint.py', str(config), str(src),
        str(tmp_path / 'out.pth')])
    tool.main()
    out = capsys.readouterr().out
    assert 'missing: 0' in out and 'unused: 0' in out, out
    assert 'Q and K rows dropped' in out
    converted = torch.load(tmp_path / 'out.pth')['state_dict']
    direct = DGSSAVisionTransformer(
        **backbone, init_cfg=dict(type='Pretrained', checkpoint=str(src)))
    direct.init_weights()
    for key, value in direct.state_dict().items():
        if key.startswith('glads.'):
            continue  # new parameters: random init
        assert torch.equal(converted[f'backbone.{key}'], value), key


def test_loads_deit_checkpoint_with_report(tmp_path):
    vit = _upstream_vit()
    state = {f'backbone.{k}': v for k, v in vit.state_dict().items()}
    path = tmp_path / 'deit.pth'
    torch.save(dict(state_dict=state), path)
    ours = DGSSAVisionTransformer(
        arch=TINY, img_size=64, patch_size=16, static_init='local',
        glad_tokens=(13, 9, 5),
        init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    ours.init_weights()
    report = ours.load_report
    assert not report['missing'] and not report['unused'] and \
        not report['mismatched']
    assert any('layers.1.attn.qkv.weight: Q and K rows dropped' in n
               for n in report['dropped'])
    assert set(report['new']) == {
        k for k in ours.state_dict()
        if k.startswith('glads.') or k.endswith('static_logits')
    }
    d = 64
    # loaded weights are copies: bit-exact
    assert_equal(ours.layers[1].attn.v.weight,
                 vit.layers[1].attn.qkv.weight[2 * d:])
    assert_equal(ours.layers[1].attn.proj.weight,
                 vit.layers[1].attn.proj.weight)
    assert_equal(ours.layers[4].attn.qkv.weight,
                 vit.layers[4].attn.qkv.weight)
    # 'dg' needs the logits of tools/dgssa_init.py
    dg = DGSSAVisionTransformer(
        arch=TINY, img_size=64, patch_size=16, glad_tokens=(13, 9, 5),
        init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    with pytest.raises(ValueError, match='tools/dgssa_init.py'):
        dg.init_weights()
    # with them, they are loaded
    logits = torch.randn(4, 17, 17)
    state['backbone.layers.1.attn.static_logits'] = logits
    state['backbone.layers.2.attn.static_logits'] = 2 * logits
    torch.save(dict(state_dict=state), path)
    dg.init_weights()
    assert_equal(dg.layers[2].attn.static_logits, 2 * logits)  # a copy


def test_vit_errors():
    kw = dict(arch=TINY, img_size=64, patch_size=16, static_init='uniform')
    with pytest.raises(ValueError, match='must decrease'):
        DGSSAVisionTransformer(glad_tokens=(13, 14, 5), **kw)
    with pytest.raises(ValueError, match='must decrease'):
        DGSSAVisionTransformer(glad_tokens=(13, 9, 1), **kw)
    with pytest.raises(ValueError, match='glad_tokens'):
        DGSSAVisionTransformer(glad_tokens=(13, 9), **kw)
    with pytest.raises(ValueError, match='distinct layer indices'):
        DGSSAVisionTransformer(static_layers=(1, 8), glad_tokens=(13, 9, 5),
                               **kw)
    with pytest.raises(ValueError, match='featmap'):
        DGSSAVisionTransformer(glad_tokens=(13, 9, 5), out_type='featmap',
                               **kw)
    with pytest.raises(ValueError, match='unknown static attention init'):
        DGSSAVisionTransformer(arch=TINY, img_size=64, static_init='mlp')
    ours = DGSSAVisionTransformer(glad_tokens=(13, 9, 5), **kw)
    with pytest.raises(ValueError, match='patch grid'):
        ours(torch.randn(1, 3, 80, 64))


def test_deit_s_paper_architecture_flops():
    deit = VisionTransformer(arch='deit-small')
    ours = DGSSAVisionTransformer(arch='deit-small', static_init='uniform')
    assert ours.tokens == [197, 197, 197, 127, 127, 77, 77, 35, 35, 35, 35,
                           35]
    x = torch.randn(1, 3, 224, 224)
    dense = count_flops(deit, x).total
    flops = count_flops(ours, x).total
    d, tokens = 384, ours.tokens
    # the layer and GLAD formulas count every LayerNorm as the counter does
    # (5 * numel: ln1 and ln2 of each layer, the norm of each GLAD); the
    # counter adds the patch embedding (a conv: output positions x weight)
    # and the final norm
    stem = 196 * d * 3 * 16 * 16
    assert dense == stem + 12 * layer_flops(197, d) + 5 * 197 * d
    assert flops == stem + architecture_flops(
        197, d, 12, [1, 2], [3, 5, 7], [127, 77, 35], 1) + \
        5 * tokens[-1] * d
    assert round(flops / dense, 2) == 0.46  # the paper: about 0.5


# --- token distillation ------------------------------------------------------


def _classifier(**kwargs):
    return GLADDistillClassifier(
        backbone=dict(type='mmvitaccel.DGSSAVisionTransformer', arch=TINY,
                      img_size=64, patch_size=16, static_init='uniform',
                      glad_tokens=(13, 9, 5)),
        teacher=dict(type='mmpretrain.VisionTransformer', arch=TINY,
                     img_size=64, patch_size=16),
        head=dict(type='mmpretrain.VisionTransformerClsHead', num_classes=5,
                  in_channels=64),
        **kwargs)


def test_token_distillation_loss(tmp_path):
    from mmpretrain.structures import DataSample
    vit = _upstream_vit()
    torch.save(vit.state_dict(), tmp_path / 'teacher.pth')
    model = _classifier(teacher_checkpoint=str(tmp_path / 'teacher.pth'),
                        distill_weight=2.0)
    model.init_weights()
    assert not model.teacher_load_report['missing']
    assert_equal(model.teacher.layers[3].attn.qkv.weight,
                 vit.layers[3].attn.qkv.weight)  # a copy
    model.train()
    assert not model.teacher.training
    x = torch.randn(2, 3, 64, 64)
    samples = [DataSample().set_gt_label(i) for i in (0, 3)]
    losses = model.loss(x, samples)
    assert set(losses) == {'loss', 'loss_glad'}
    # loss_glad = w * sum_l MSE(Y_l, GLAD_t,l(X_t,l))
    with torch.no_grad():
        _, ys = model.backbone.forward_with_glad(x)
        feats = {}
        hooks = [
            vit.layers[i - 1].register_forward_hook(
                lambda m, a, o, i=i: feats.update({i: o}))
            for i in (3, 5, 7)
        ]
        vit(x)
        for h in hooks:
            h.remove()
    ref = sum(
        torch.nn.functional.mse_loss(y, g(feats[l][:, 1:]))
        for y, g, l in zip(ys, model.teacher_glads, (3, 5, 7)))
    # the same modules (the teacher holds vit's weights) on the same input,
    # the same reductions in the same order: bit-exact
    assert_equal(losses['loss_glad'].detach(), 2.0 * ref)
    sum(losses.values()).backward()
    assert all(p.grad is None for p in model.teacher.parameters())
    for g in list(model.teacher_glads) + list(model.backbone.glads):
        assert g.weight.grad.abs().sum() > 0



def test_prediction_distillation_with_a_teacher_head():
    from mmpretrain.structures import DataSample
    torch.manual_seed(0)
    head = dict(type='mmpretrain.VisionTransformerClsHead', num_classes=5,
                in_channels=64)
    model = _classifier(teacher_head=head, kd_weight=0.5)
    model.init_weights()
    with torch.no_grad():  # the heads start at zero: KL(p_t || p_s) = 0
        for h in (model.head, model.teacher_head):
            h.layers.head.weight.normal_(0, 0.5)
    model.train()
    assert not model.teacher_head.training
    x = torch.randn(2, 3, 64, 64)
    samples = [DataSample().set_gt_label(i) for i in (1, 2)]
    losses = model.loss(x, samples)
    assert set(losses) == {'loss', 'loss_glad', 'loss_kd'}
    with torch.no_grad():
        student = model.head(model.backbone(x))
        teacher = model.teacher_head(model.teacher(x))
    # KL(p_t || p_s): the soft cross-entropy less the teacher's entropy
    log_t, log_s = teacher.log_softmax(-1), student.log_softmax(-1)
    ref = (teacher.softmax(-1) * (log_t - log_s)).sum(-1).mean()
    assert ref > 0.01, 'the heads must disagree'
    # the logits are those of the loss (the same modules, bit-exact); p_t
    # as softmax or as exp(log_softmax) differs by K + 4 + max|log p_t|
    # roundings (relative), the sums over K = 5 classes and 2 images add
    # K + 2: n = 2 K + 6 + max|log p_t|, S = max sum p_t |log_t - log_s|
    K = 5
    scale = float((teacher.softmax(-1) * (log_t - log_s).abs()).sum(-1).max())
    torch.testing.assert_close(
        losses['loss_kd'].detach(), 0.5 * ref, rtol=0,
        atol=rounding_tol(ref.dtype, 2 * K + 6 + int(log_t.abs().max()) + 1,
                          scale))
    sum(losses.values()).backward()
    assert all(p.grad is None for p in model.teacher_head.parameters())
    assert model.head.layers.head.weight.grad.abs().sum() > 0

def test_classifier_errors():
    with pytest.raises(ValueError, match='DGSSAVisionTransformer'):
        GLADDistillClassifier(
            backbone=dict(type='mmpretrain.VisionTransformer', arch=TINY,
                          img_size=64, patch_size=16))
    with pytest.raises(ValueError, match='teacher_head needs a teacher'):
        GLADDistillClassifier(
            backbone=dict(type='mmvitaccel.DGSSAVisionTransformer',
                          arch=TINY, img_size=64, patch_size=16,
                          static_init='uniform', glad_tokens=(13, 9, 5)),
            teacher_head=dict(type='mmpretrain.VisionTransformerClsHead',
                              num_classes=5, in_channels=64))
    with pytest.raises(ValueError, match='must match'):
        GLADDistillClassifier(
            backbone=dict(type='mmvitaccel.DGSSAVisionTransformer',
                          arch=TINY, img_size=64, patch_size=16,
                          static_init='uniform', glad_tokens=(13, 9, 5)),
            teacher=dict(type='mmpretrain.VisionTransformer', arch=TINY,
                         img_size=96, patch_size=16))


# --- DGSSA-Swin ---------------------------------------------------------------


def _upstream_swin(**kwargs):
    torch.manual_seed(0)
    swin = SwinTransformer(**SWIN, **kwargs)
    swin.init_weights()
    return _perturbed(swin)


def _ours_swin(swin=None, static_blocks=3, static_init='local', **kwargs):
    ours = DGSSASwinTransformer(**SWIN, static_blocks=static_blocks,
                                static_init=static_init, **kwargs)
    ours.init_weights()
    if swin is not None:
        state, _, _ = ours.convert_host_state_dict(swin.state_dict())
        missing, unused = ours.load_state_dict(state, strict=False)
        assert not unused
    ours.eval()
    return ours


def _static_names(model):
    return [name for name, module in model.named_modules()
            if isinstance(module, StaticShiftWindowMSA)]


@pytest.mark.parametrize('arch,blocks', [
    ('tiny', ['stages.0.blocks.1', 'stages.1.blocks.0', 'stages.1.blocks.1',
              'stages.2.blocks.0', 'stages.2.blocks.1', 'stages.2.blocks.2']),
    ('small', ['stages.0.blocks.1', 'stages.1.blocks.0', 'stages.1.blocks.1']
     + [f'stages.2.blocks.{j}' for j in range(9)]),
])
def test_swin_static_blocks_start_at_block_1_by_default(arch, blocks):
    # the paper: sum_{l=1}^{P} gamma_l = P, "except the 0-th layer"
    model = DGSSASwinTransformer(arch=arch, static_init='uniform')
    assert _static_names(model) == [f'{b}.attn' for b in blocks]
    assert [n for n, _ in model.static_block_items()] == blocks
    # the other reading ("the first P layers use the SSA") is an option
    first = DGSSASwinTransformer(arch=arch, static_init='uniform',
                                 static_start=0)
    assert _static_names(first)[0] == 'stages.0.blocks.0.attn'
    assert len(_static_names(first)) == len(blocks)
    assert _static_names(first)[1:] == _static_names(model)[:-1]


def test_swin_static_start_errors():
    with pytest.raises(ValueError, match=r'static_start must be an int in '
                       r'0\.\.4 .*got 5'):
        DGSSASwinTransformer(**SWIN, static_blocks=3, static_start=5)
    with pytest.raises(ValueError, match='static_start'):
        DGSSASwinTransformer(**SWIN, static_blocks=3, static_start=-1)
    with pytest.raises(ValueError, match='static_start'):
        DGSSASwinTransformer(**SWIN, static_blocks=7, static_start=1)
    DGSSASwinTransformer(**SWIN, static_blocks=7, static_start=0)


def test_swin_without_static_blocks_is_upstream():
    swin = _upstream_swin()
    ours = _ours_swin(swin, static_blocks=0)
    x = torch.randn(1, 3, 100, 75)
    with torch.no_grad():  # the same modules in the same order: bit-exact
        for a, b in zip(ours(x), swin(x)):
            assert torch.equal(a, b)


def test_swin_returns_the_pyramid_and_keeps_later_blocks():
    swin = _upstream_swin()
    ours = _ours_swin(swin, static_blocks=2)  # blocks 1, 2
    assert isinstance(ours.stages[0].blocks[0].attn, ShiftWindowMSA)
    assert isinstance(ours.stages[1].blocks[0].attn, StaticShiftWindowMSA)
    assert isinstance(ours.stages[1].blocks[1].attn, ShiftWindowMSA)
    assert ours.stages[0].blocks[1].attn.shift_size == 3  # window 7
    x = torch.randn(2, 3, 96, 128)
    with torch.no_grad():
        outs = ours(x)
    assert [tuple(o.shape) for o in outs] == [(2, 32, 24, 32),
                                             (2, 64, 12, 16),
                                             (2, 128, 6, 8), (2, 256, 3, 4)]
    # upstream blocks after DGSSA: the same modules, the same outputs
    feats = torch.randn(2, 12 * 16, 64)
    with torch.no_grad():  # the same modules and weights: bit-exact
        assert_equal(ours.stages[1].blocks[1](feats, (12, 16)),
                     swin.stages[1].blocks[1](feats, (12, 16)))


def test_static_window_block_reproduces_upstream_on_one_window():
    # float64, with the logits log(A) of the float64 map itself
    # (attention_to_logits rounds to float32; test_ops_dgssa checks it)
    swin = _upstream_swin()
    ours = _ours_swin(swin, static_blocks=1, static_start=0).double()
    swin.double()
    block = swin.stages[0].blocks[0]  # no shift
    x = torch.randn(1, 49, 32, dtype=torch.float64)
    with torch.no_grad(), summed_magnitude(block) as sums:
        ref = block(x, (7, 7))
        attn = window_attention(block.attn.w_msa, block.norm1(x))
    with torch.no_grad():
        ours.stages[0].blocks[0].attn.w_msa.static_logits.copy_(
            attn[0].log())
        out = ours.stages[0].blocks[0](x, (7, 7))
    # one block of width 32 on a 49-token window: LayerNorms 2 x 2 x 32,
    # qkv 32, logits 2 x 32, softmax and A V 3 x 49, proj 32, fc1 32, fc2
    # 2 x 128, twice (the map, then the block): n = 1500
    assert_rounding_close(out, ref, 1500, max(sums))


def test_shift_mask_is_swins():
    # upstream's shifting, padding and -100 mask driving our static window
    # attention == our own bool shift mask (no padding here)
    torch.manual_seed(0)
    upstream = ShiftWindowMSA(16, 2, 7, shift_size=3).eval()
    ours = StaticShiftWindowMSA.from_dynamic(upstream,
                                             torch.randn(2, 49, 49)).eval()
    upstream.w_msa = ours.w_msa
    ours.double()
    upstream.double()
    x = torch.randn(2, 14 * 21, 16, dtype=torch.float64)
    with torch.no_grad(), summed_magnitude(ours) as sums:
        out = ours(x, (14, 21))
        ref = upstream(x, (14, 21))
    logits = ours.w_msa.static_logits
    assert logits.max() - logits.min() < 30
    # float64. Upstream's -100 leaves a masked key a weight below
    # exp(-100 + spread of the static logits) < 1e-30, far below rounding;
    # the rest is rounding: v (16), the softmax and A V over 49 keys
    # (3 x 49), proj (16): n = 200
    assert_rounding_close(out, ref, 200, max(sums))
    # the mask separates the shift regions: window (1, 2) of the rolled map
    # holds 4 regions
    valid = torch.ones(14, 21, dtype=torch.bool)
    mask = ours.attention_mask(valid)
    assert mask.shape == (6, 49, 49)
    assert mask[0].all() and not mask[5].all()
    # bottom-right window: regions of 4x4, 4x3, 3x4 and 3x3 tokens, each
    # token attending to its region only
    sums = mask[5].sum(-1)
    assert {int(n): int((sums == n).sum()) for n in sums.unique()} == {
        16: 16, 12: 24, 9: 9}


@pytest.mark.parametrize('static_blocks', [2, 3])
def test_swin_padding_is_masked(static_blocks, monkeypatch):
    ours = _ours_swin(_upstream_swin(), static_blocks=static_blocks,
                      static_init='random')
    # 60x44 -> a 15x11 map in stage 1: padded to 21x14
    assert_padding_invariant(ours, torch.randn(1, 3, 60, 44), static_module,
                             monkeypatch)


def test_swin_loads_checkpoint_and_folds_the_bias(tmp_path):
    swin = _upstream_swin()
    path = tmp_path / 'swin.pth'
    torch.save(dict(state_dict={f'backbone.{k}': v
                                for k, v in swin.state_dict().items()}),
               path)
    ours = DGSSASwinTransformer(
        **SWIN, static_blocks=3, static_init='uniform',
        init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    ours.init_weights()
    report = ours.load_report
    assert not report['missing'] and not report['mismatched']
    assert not report['unused']
    assert sum('Q and K dropped' in n for n in report['dropped']) == 6
    assert sum('folded' in n for n in report['dropped']) == 3
    for (i, j) in ((0, 1), (1, 0), (1, 1)):
        msa = swin.stages[i].blocks[j].attn.w_msa
        static = ours.stages[i].blocks[j].attn.w_msa
        # the folded bias and the V rows are copies: bit-exact
        assert_equal(static.static_logits, relative_position_bias(msa))
        assert_equal(static.v.weight, msa.qkv.weight[-32 * (2**i):])
    with pytest.raises(ValueError, match='dgssa_init'):
        DGSSASwinTransformer(
            **SWIN, static_blocks=3,
            init_cfg=dict(type='Pretrained',
                          checkpoint=str(path))).init_weights()


def test_swin_gradients_and_errors():
    ours = _ours_swin(static_blocks=3, static_init='uniform')
    ours.train()
    random_readout(ours(torch.randn(1, 3, 64, 64))).backward()
    msas = [ours.stages[i].blocks[j].attn.w_msa
            for i, j in ((0, 1), (1, 0), (1, 1))]
    assert all(isinstance(msa, StaticWindowMSA) for msa in msas)
    assert_clear_gradients((f'static block {k}', msa.static_logits)
                           for k, msa in enumerate(msas))
    with pytest.raises(ValueError, match='static_blocks must be in'):
        DGSSASwinTransformer(**SWIN, static_blocks=8)
    # a custom depth takes the switch's rule: half of the 7 blocks
    assert DGSSASwinTransformer(**SWIN).static_blocks == 3
    with pytest.raises(ValueError, match='unknown arch'):
        DGSSASwinTransformer(arch='huge')
