"""Our ViT backbones keep upstream's ``frozen_stages``: the layers they
rebuild after upstream froze its stages, and their new modules inside the
frozen part, stay frozen (no gradient, eval mode), also after
``train()``; what follows the frozen part trains."""
import pytest
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
    import torch

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
    import torch
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
    assert large.load_report['missing'] == [] and \
        large.load_report['mismatched'] == []
