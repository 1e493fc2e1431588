"""Our ViT backbones keep upstream's ``frozen_stages``: the layers they
rebuild after upstream froze its stages, and their new modules inside the
frozen part, stay frozen (no gradient, eval mode), also after
``train()``; what follows the frozen part trains."""
import re

import pytest
import torch
from mmpretrain.models.backbones import VisionTransformer

import mmvitaccel  # noqa: F401
from mmvitaccel.registry import MODELS

ARCH = dict(embed_dims=32, num_layers=6, num_heads=2, feedforward_channels=64)
FROZEN = 4


@pytest.mark.parametrize('type_, extra', [
    ('DGSSAVisionTransformer',
     dict(static_layers=(1, 2, 4), glad_layers=(3, 5),
          glad_tokens=(10, 8))),
    ('STViTDeiT', dict(stgm_layers=(1, 2))),
    ('HViTDeiT', dict()),
    ('TokenPrunedVisionTransformer', dict(prune_before=(2, ))),
    ('ToMeVisionTransformer', dict(r=2)),
])
def test_frozen_stages_freeze_what_the_method_rebuilt(type_, extra):
    model = MODELS.build(dict(type=f'mmvitaccel.{type_}', arch=ARCH,
                              img_size=64, patch_size=16,
                              frozen_stages=FROZEN, **extra))
    upstream = VisionTransformer(arch=ARCH, img_size=64, patch_size=16,
                                 frozen_stages=FROZEN)
    for m in (model, upstream):
        m.train()
    for i, layer in enumerate(model.layers):
        frozen = i < FROZEN
        grads = {p.requires_grad for p in layer.parameters()}
        assert grads == {not frozen}, (i, grads)
        assert layer.training is not frozen, i
    for name in ('pos_embed', 'cls_token'):
        assert getattr(model, name).requires_grad is False
    if type_ == 'DGSSAVisionTransformer':
        # layer 1, 2 static and frozen, layer 4 static and trained; the GLAD
        # before layer 3 feeds a frozen layer, the one before 5 does not
        assert not model.layers[1].attn.static_logits.requires_grad
        assert model.layers[4].attn.static_logits.requires_grad
        assert not any(p.requires_grad for p in model.glads[0].parameters())
        assert all(p.requires_grad for p in model.glads[1].parameters())
        assert not model.glads[0].training and model.glads[1].training
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trained > 0


def test_resized_static_logits_keep_constants_and_the_grid():
    from mmvitaccel.ops import resize_static_logits
    logits = torch.full((2, 1 + 16, 1 + 16), 0.5)
    logits[:, 0, 0] = 3.
    out = resize_static_logits(logits, 1, (6, 6))
    assert out.shape == (2, 37, 37)
    # bicubic weights sum to one: a constant stays that constant (float32
    # rounding of a 4-tap sum per axis, two axes: a few ulp of 0.5)
    assert torch.allclose(out[:, 1:, :], torch.full_like(out[:, 1:, :], .5),
                          rtol=0, atol=8 * torch.finfo(torch.float32).eps)
    assert out[0, 0, 0] == 3.
    assert resize_static_logits(logits, 1, (4, 4)) is logits
    with pytest.raises(ValueError, match='no square grid'):
        resize_static_logits(torch.zeros(2, 1 + 12, 1 + 12), 1, (6, 6))


def _saved(tmp_path, model):
    path = str(tmp_path / 'model.pth')
    torch.save(dict(state_dict=model.state_dict()), path)
    return path


@pytest.mark.parametrize('type_, extra, refused', [
    ('DGSSAVisionTransformer',
     dict(static_layers=(1, 2), glad_layers=(), glad_tokens=()), None),
    ('DGSSAVisionTransformer',
     dict(static_layers=(1, ), glad_layers=(2, ), glad_tokens=(10, )),
     'glads.0.weight is'),
    ('STViTDeiT', dict(stgm_layers=(1, 2), pooling='intra_inter'),
     r'pooler.inter.weight is .* img_size it was trained at'),
    ('STViTDeiT', dict(stgm_layers=(1, 2), pooling='max'), None),
    ('ToMeVisionTransformer', dict(r=2), None),
])
def test_a_checkpoint_at_another_img_size(tmp_path, type_, extra, refused):
    """224 -> 384 in small: upstream resizes the position table; ours also
    resize the static logits on the patch grid, and refuse by name what
    counts tokens (GLAD) or bins (the learnable pooler)."""
    small = dict(type=f'mmvitaccel.{type_}', arch=dict(ARCH, num_layers=4),
                 patch_size=16, **extra)
    if type_ == 'DGSSAVisionTransformer':
        small['static_init'] = 'random'
    path = _saved(tmp_path, MODELS.build(dict(small, img_size=64)))
    large = MODELS.build(dict(
        small, img_size=96, init_cfg=dict(type='Pretrained',
                                          checkpoint=path)))
    if refused:
        with pytest.raises(ValueError, match=refused):
            large.init_weights()
        return
    large.init_weights()
    if type_ == 'ToMeVisionTransformer':
        # no new parameters: upstream's own loading, every tensor, the
        # position table resized to the new grid
        saved = torch.load(path)['state_dict']
        for name, value in large.state_dict().items():
            if name == 'pos_embed':
                assert value.shape == (1, 1 + 36, 32)
            else:
                assert torch.equal(value, saved[name]), name
        return
    assert large.load_report['missing'] == [] and \
        large.load_report['mismatched'] == []


#: where our ViTs differ from mmpretrain's VisionTransformer built with the
#: same arguments (``img_size=64``), each refused by name or by design and
#: documented on the method page; everything else is equal:
#: (ours, out_type, the input is not img_size) -> what we give instead
VIT_DIFFERENCES = {
    # the class token is gone before the STGM
    ('STViTDeiT', 'cls_token', False): 'out_type=.cls_token. is impossible',
    ('STViTDeiT', 'cls_token', True): 'out_type=.cls_token. is impossible',
    # the learnable pooler's bins are those of the img_size grid
    **{('STViTDeiT', t, True): "pooling='intra_inter' is built for"
       for t in ('featmap', 'avg_featmap', 'raw')},
    # static attention over a fixed token count; GLAD replaces the grid
    **{('DGSSAVisionTransformer', t, True): 'DGSSA/GLAD are built for'
       for t in ('cls_token', 'avg_featmap', 'raw')},
    **{('DGSSAVisionTransformer', 'featmap', s): "featmap' needs the patch"
       for s in (False, True)},
}
VITS = {
    'TokenPrunedVisionTransformer': dict(prune_before=(2, )),
    'STViTDeiT': dict(stgm_layers=(1, 2)),
    'DGSSAVisionTransformer': dict(static_layers=(1, 2), glad_layers=(3, ),
                                   glad_tokens=(10, )),
    'HViTDeiT': dict(),
    'ToMeVisionTransformer': dict(r=2),
}


def _vit_outcome(build, x):
    """Args: build (callable): makes the model. x (Tensor). Returns:
    list[tuple] | str: output shapes, or the message of a ValueError."""
    try:
        model = build()
        model.eval()
        with torch.no_grad():
            return [tuple(o.shape) for o in model(x)]
    except ValueError as e:
        return str(e)


@pytest.mark.parametrize('ours', sorted(VITS))
@pytest.mark.parametrize('out_type',
                         ['cls_token', 'featmap', 'avg_featmap', 'raw'])
@pytest.mark.parametrize('size', [(64, 64), (80, 96)])
def test_vit_outputs_against_upstream(ours, out_type, size):
    """``raw`` holds the tokens each method keeps (fewer than upstream's,
    by design: pruned, semantic or aggregated tokens), the rest the same
    shapes as upstream, or a refusal by name (:data:`VIT_DIFFERENCES`)."""
    kwargs = dict(arch=ARCH, img_size=64, patch_size=16, out_type=out_type,
                  out_indices=[3, 5])
    x = torch.rand(1, 3, *size)
    got = _vit_outcome(lambda: MODELS.build(dict(
        type=f'mmvitaccel.{ours}', **kwargs, **VITS[ours])), x)
    want = _vit_outcome(lambda: VisionTransformer(**kwargs), x)
    refusal = VIT_DIFFERENCES.get((ours, out_type, size != (64, 64)))
    if refusal:
        assert isinstance(got, str) and re.search(refusal, got), got
    elif out_type == 'raw' and ours not in ('HViTDeiT',
                                            'ToMeVisionTransformer'):
        assert [g[0::2] for g in got] == [w[0::2] for w in want]
        assert all(g[1] < w[1] for g, w in zip(got, want)), (got, want)
    else:
        assert got == want, (got, want)

