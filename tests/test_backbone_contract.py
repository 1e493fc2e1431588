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
