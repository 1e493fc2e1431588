"""The shared ViT layer loop (``models/utils/vit.py``) pinned to mmpretrain's
``VisionTransformer``: every ViT backbone that runs its layers through
``run_layers`` gives upstream's outputs bit for bit when its method is off,
for each ``out_type``, with and without the final norm, at an odd patch
grid and at an input size other than ``img_size``; the per-layer arguments
(``vit_layer_cfgs``) are upstream's; STViT-DeiT's semantic tail and the
teachers (GLAD distillation, token pruning) follow the same conventions."""
import pytest
import torch
from mmpretrain.models import VisionTransformer
from mmpretrain.models.backbones.vision_transformer import \
    TransformerEncoderLayer

import mmvitaccel  # noqa: F401
from mmvitaccel.models import (DGSSAVisionTransformer, GLADDistillClassifier,
                               HViTDeiT, STViTDeiT,
                               TokenPrunedVisionTransformer)
from mmvitaccel.models.token_pruning.token_pruned_vit import \
    tokens_and_last_attention
from mmvitaccel.models.utils.vit import (embed_tokens, run_layers,
                                         vit_layer_cfgs)

from .tolerance import assert_rounding_close

TINY = dict(embed_dims=32, num_layers=4, num_heads=2, feedforward_channels=64)
#: a 7 x 5 patch grid: odd sides, not square
KW = dict(arch=TINY, img_size=(56, 40), patch_size=8, out_indices=(1, 3))
OUT_TYPES = ('cls_token', 'featmap', 'avg_featmap', 'raw')

#: each backbone with its method switched off (or in its parity mode)
BACKBONES = {
    'hvit': lambda **kw: HViTDeiT(hmhsa=False, cffn=False, **kw),
    'dgssa': lambda **kw: DGSSAVisionTransformer(
        static_layers=(), glad_layers=(), glad_tokens=(), **kw),
    'pruned_value': lambda **kw: TokenPrunedVisionTransformer(
        prune_before=(1, 2), selector='value', density=1.0, **kw),
    'pruned_off': lambda **kw: TokenPrunedVisionTransformer(
        prune_before=(2, ), selector='threshold', thresholds=0.01,
        prune=False, **kw),
}
#: input sizes each backbone accepts: DGSSA is built for img_size only
SIZES = {
    'hvit': ((56, 40), (40, 72)),
    'dgssa': ((56, 40), ),
    'pruned_value': ((56, 40), (40, 72)),
    'pruned_off': ((56, 40), (40, 72)),
}


def _perturbed(model):
    torch.manual_seed(0)
    model.init_weights()
    with torch.no_grad():  # away from the init values: a load must copy
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    model.eval()
    return model


def _images(size, B=2):
    g = torch.Generator().manual_seed(1)
    return torch.randn(B, 3, *size, generator=g)


@pytest.mark.parametrize('final_norm', [True, False])
@pytest.mark.parametrize('out_type', OUT_TYPES)
def test_run_layers_is_upstreams_forward(out_type, final_norm):
    vit = _perturbed(
        VisionTransformer(**KW, out_type=out_type, final_norm=final_norm))
    x = _images((40, 72))
    with torch.no_grad():
        ref = vit(x)
        outs, tokens = run_layers(vit, *embed_tokens(vit, x))
        _, only_tokens = run_layers(vit, *embed_tokens(vit, x),
                                    outputs=False)
    assert len(outs) == len(ref) == 2
    for a, b in zip(outs, ref):
        assert torch.equal(a, b)
    assert torch.equal(tokens, only_tokens)
    if out_type == 'raw':  # the tokens after the last layer (and norm)
        assert torch.equal(tokens, ref[-1])


@pytest.mark.parametrize('name', sorted(BACKBONES))
@pytest.mark.parametrize('final_norm', [True, False])
@pytest.mark.parametrize('out_type', OUT_TYPES)
def test_switched_off_backbones_are_upstream_bit_exactly(
        name, out_type, final_norm):
    kwargs = dict(KW, out_type=out_type, final_norm=final_norm)
    vit = _perturbed(VisionTransformer(**kwargs))
    ours = BACKBONES[name](**kwargs)
    missing, unused = ours.load_state_dict(vit.state_dict(), strict=False)
    assert not unused and set(missing) <= {'thresholds'}
    ours.eval()
    for size in SIZES[name]:
        x = _images(size)
        with torch.no_grad():
            ref, out = vit(x), ours(x)
        assert len(out) == len(ref) == 2
        for a, b in zip(out, ref):
            assert torch.equal(a, b), (name, out_type, final_norm, size)


@pytest.mark.parametrize('name', ['hvit', 'dgssa'])
@pytest.mark.parametrize('out_type', ['featmap', 'avg_featmap', 'raw'])
def test_without_class_token_is_upstream_bit_exactly(name, out_type):
    kwargs = dict(KW, out_type=out_type, with_cls_token=False)
    vit = _perturbed(VisionTransformer(**kwargs))
    ours = BACKBONES[name](**kwargs)
    ours.load_state_dict(vit.state_dict())
    ours.eval()
    x = _images((56, 40))
    with torch.no_grad():
        for a, b in zip(ours(x), vit(x)):
            assert torch.equal(a, b)


def test_layer_cfgs_are_upstreams():
    """The layers a backbone builds from ``vit_layer_cfgs`` get upstream's
    arguments: the drop path schedule, layer scale, qkv bias, norm and the
    per-layer ``layer_cfgs`` on top."""
    kwargs = dict(
        arch=TINY, drop_path_rate=0.3, drop_rate=0.1, qkv_bias=False,
        layer_scale_init_value=0.5,
        layer_cfgs=[dict(attn_drop_rate=0.05 * i) for i in range(4)])
    vit = VisionTransformer(**kwargs)
    cfgs = vit_layer_cfgs(vit, kwargs)
    assert len(cfgs) == 4
    for layer, cfg in zip(vit.layers, cfgs):
        torch.manual_seed(0)
        rebuilt = TransformerEncoderLayer(**cfg)
        assert repr(rebuilt) == repr(layer)
        assert rebuilt.attn.out_drop.drop_prob == \
            layer.attn.out_drop.drop_prob
        assert rebuilt.ffn.dropout_layer.drop_prob == \
            layer.ffn.dropout_layer.drop_prob
        assert rebuilt.attn.attn_drop == layer.attn.attn_drop
    # float64 linspace: the step, its multiple and the decimals each round
    # by u = 2^-53 relative
    assert [c['drop_path_rate'] for c in cfgs] == pytest.approx(
        [0., 0.1, 0.2, 0.3], rel=4 * 2**-53, abs=0)
    # the backbones that replace upstream's layers build them from these
    for model in (HViTDeiT(hmhsa=False, cffn=False, **kwargs),
                  STViTDeiT(stgm_layers=(1, 2), semantic_tokens=4,
                            pooling='avg', **kwargs)):
        for ours, theirs in zip(model.layers, vit.layers):
            assert ours.attn.out_drop.drop_prob == \
                theirs.attn.out_drop.drop_prob
            assert ours.attn.attn_drop == theirs.attn.attn_drop
            assert ours.attn.qkv.bias is None
    with pytest.raises(ValueError, match='layer_cfgs'):
        vit_layer_cfgs(vit, dict(kwargs, layer_cfgs=[{}, {}]))


@pytest.mark.parametrize('final_norm', [True, False])
@pytest.mark.parametrize('out_type', ['featmap', 'avg_featmap', 'raw'])
def test_stvit_semantic_tail_follows_upstreams_conventions(
        out_type, final_norm):
    """After STGM-2, STViT-DeiT's semantic tokens go through the upstream
    layers, the final norm on the last one and the output formatting of
    each ``out_indices`` layer (the ``s x s`` grid for ``'featmap'``)."""
    model = _perturbed(
        STViTDeiT(arch=TINY, img_size=(56, 40), patch_size=8,
                  stgm_layers=(1, 2), semantic_tokens=4, pooling='avg',
                  out_type=out_type, final_norm=final_norm,
                  out_indices=(2, 3)))
    stgm2 = {}
    model.layers[2].register_forward_hook(
        lambda m, a, o: stgm2.__setitem__('out', o))
    x = _images((40, 72))
    with torch.no_grad():
        outs = model(x)
        sem = stgm2['out']  # (B, 4, C)
        refs = [sem]
        sem = model.layers[3](sem)
        refs.append(model.ln1(sem) if final_norm else sem)
    for out, ref in zip(outs, refs):
        if out_type == 'featmap':
            ref = ref.reshape(2, 2, 2, -1).permute(0, 3, 1, 2)
        elif out_type == 'avg_featmap':
            ref = model.ln2(ref.mean(dim=1))
        assert torch.equal(out, ref)


@pytest.mark.parametrize('final_norm', [True, False])
@pytest.mark.parametrize('with_head', [True, False])
def test_glad_teacher_forward_is_the_teachers_loop(with_head, final_norm):
    """The GLAD teacher's tokens are the inputs of its layers, its logits
    those of its head on its own forward, bit for bit."""
    head = dict(type='mmpretrain.VisionTransformerClsHead', num_classes=5,
                in_channels=32)
    model = GLADDistillClassifier(
        backbone=dict(type='mmvitaccel.DGSSAVisionTransformer', arch=TINY,
                      img_size=(56, 40), patch_size=8, static_init='uniform',
                      static_layers=(1, ), glad_layers=(1, 3),
                      glad_tokens=(20, 9)),
        teacher=dict(type='mmpretrain.VisionTransformer', arch=TINY,
                     img_size=(56, 40), patch_size=8, final_norm=final_norm),
        head=head,
        teacher_head=head if with_head else None)
    _perturbed(model)
    teacher = model.teacher
    inputs = {}
    for i in (1, 3):
        teacher.layers[i].register_forward_pre_hook(
            lambda m, a, i=i: inputs.__setitem__(i, a[0]))
    x = _images((56, 40))
    with torch.no_grad():
        tokens, logits = model.teacher_forward(x)
        ref = teacher(x)
    assert torch.equal(tokens[0], inputs[1])
    assert torch.equal(tokens[1], inputs[3])
    if with_head:
        with torch.no_grad():
            assert torch.equal(logits, model.teacher_head(ref))
    else:
        assert logits is None


@pytest.mark.parametrize('final_norm', [True, False])
def test_pruning_teacher_tokens_follow_the_final_norm(final_norm):
    vit = _perturbed(
        VisionTransformer(**dict(KW, out_type='raw', final_norm=final_norm,
                                 out_indices=-1))).double()
    x = _images((40, 72)).double()
    with torch.no_grad():
        tokens, attn, hw = tokens_and_last_attention(vit, x)
        ref = vit(x)[0]
    assert tuple(hw) == (5, 9)
    assert attn.shape == (2, 2, 46, 46)
    # the softmax's sum and this one, 46 terms each, scale 1
    assert_rounding_close(attn.sum(-1),
                          torch.ones(2, 2, 46, dtype=torch.double), 2 * 46,
                          1.)
    # the last layer's attention is computed explicitly (not upstream's
    # fused kernel): equal up to rounding, float64, the chain through the 4
    # layers (norms, qkv, proj, fc1 of C = 32, fc2 64, d = 16, 46 tokens
    # twice)
    assert_rounding_close(tokens, ref, 4 * (5 * 32 + 64 + 16 + 2 * 46))
