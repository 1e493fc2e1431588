"""STViT-DeiT: the cross-attention ViT layer, DeiT weights (mmpretrain and
official layouts)."""
import importlib.util
import os.path as osp

import pytest
import torch
from mmpretrain.models import VisionTransformer
from mmpretrain.models.backbones.vision_transformer import \
    TransformerEncoderLayer

from mmvitaccel.models.layers import CrossAttentionViTLayer
from mmvitaccel.models.utils import deit_converter, deit_state_dict

#: 8 layers so that the default STGM at (4, 5) fits, with 2 layers after it
TINY = dict(embed_dims=64, num_layers=8, num_heads=2, feedforward_channels=128)
LAYER = dict(embed_dims=64, num_heads=4, feedforward_channels=128)


def _upstream(**kwargs):
    torch.manual_seed(0)
    vit = VisionTransformer(arch=TINY, **kwargs)
    vit.init_weights()
    with torch.no_grad():  # not the init values: a load must copy them
        for p in vit.parameters():
            p.add_(0.1 * torch.randn_like(p))
    vit.eval()  # mmpretrain backbones' train() returns None: no chaining
    return vit


# --- the layer ---------------------------------------------------------------


@pytest.mark.parametrize('layer_scale', [0., 0.5])
def test_cross_layer_is_the_upstream_layer_on_its_own_tokens(layer_scale):
    torch.manual_seed(0)
    ref = TransformerEncoderLayer(**LAYER, layer_scale_init_value=layer_scale)
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_(0, 0.2)
    layer = CrossAttentionViTLayer(**LAYER,
                                   layer_scale_init_value=layer_scale)
    layer.load_state_dict(ref.state_dict())  # same names, strict
    x = torch.randn(2, 10, 64)
    with torch.no_grad():
        torch.testing.assert_close(
            layer.eval()(x, layer.key_values(x)), ref.eval()(x))


def _explicit_mha(layer, query, keys):
    """``Proj(softmax(q k^T / sqrt(d)) v)`` written out with the rows of the
    layer's fused qkv: the reference for the run-time split."""
    C, heads = layer.embed_dims, layer.attn.num_heads
    W, b = layer.attn.qkv.weight, layer.attn.qkv.bias
    q = layer.ln1(query) @ W[:C].T + b[:C]
    k = layer.ln1(keys) @ W[C:2 * C].T + b[C:2 * C]
    v = layer.ln1(keys) @ W[2 * C:].T + b[2 * C:]

    def split(t):
        return t.view(t.shape[0], t.shape[1], heads, -1).transpose(1, 2)

    q, k, v = split(q), split(k), split(v)
    attn = (q @ k.transpose(-2, -1) * (C // heads)**-0.5).softmax(-1)
    out = (attn @ v).transpose(1, 2).reshape(query.shape)
    return layer.attn.proj(out)


def test_cross_layer_attends_to_other_tokens_and_masks_keys():
    torch.manual_seed(0)
    layer = CrossAttentionViTLayer(**LAYER).eval()
    query, keys = torch.randn(2, 5, 64), torch.randn(2, 12, 64)
    shortcut = torch.randn(2, 5, 64)
    with torch.no_grad():
        out = layer(query, layer.key_values(keys), shortcut=shortcut)
        x = shortcut + _explicit_mha(layer, query, keys)
        torch.testing.assert_close(out, layer.ffn(layer.ln2(x), identity=x))
        valid = torch.rand(2, 12) > 0.4
        valid[:, 0] = True
        noisy = torch.where(valid[..., None], keys,
                            100 * torch.randn_like(keys))
        torch.testing.assert_close(
            layer(query, layer.key_values(keys), valid),
            layer(query, layer.key_values(noisy), valid))
        with pytest.raises(ValueError, match='2 \\* 64 channels'):
            layer(query, keys)


# --- weights -----------------------------------------------------------------


def _official_layout(mmpretrain_state):
    """mmpretrain ViT names -> the facebookresearch/deit (timm) names."""
    out = {}
    for k, v in mmpretrain_state.items():
        k = k.replace('ffn.layers.0.0.', 'mlp.fc1.')
        k = k.replace('ffn.layers.1.', 'mlp.fc2.')
        k = k.replace('attn.gamma1.weight', 'gamma_1')
        k = k.replace('ffn.gamma2.weight', 'gamma_2')
        k = k.replace('layers.', 'blocks.')
        k = k.replace('.ln1.', '.norm1.').replace('.ln2.', '.norm2.')
        k = k.replace('patch_embed.projection.', 'patch_embed.proj.')
        if k.startswith('ln1.'):
            k = 'norm.' + k[4:]
        if k.startswith('ln2.'):
            k = 'fc_norm.' + k[4:]
        out[k] = v
    out['head.weight'], out['head.bias'] = torch.zeros(10, 64), torch.zeros(10)
    return out


def test_official_deit_layout_round_trip():
    # layer scale and a pooled-feature norm exercise every renaming
    vit = _upstream(layer_scale_init_value=0.1, out_type='avg_featmap')
    official = _official_layout(vit.state_dict())
    assert 'blocks.0.attn.qkv.weight' in official and 'cls_token' in official
    converted = deit_state_dict(dict(model=official))
    assert list(converted) == list(vit.state_dict())
    for key, value in vit.state_dict().items():
        assert torch.equal(converted[key], value), key


def test_converter_agrees_with_mmpretrain_deit3_script():
    import mmpretrain
    script = osp.join(
        osp.dirname(mmpretrain.__file__), '.mim', 'tools', 'model_converters',
        'deit3_to_mmpretrain.py')
    if not osp.isfile(script):
        pytest.skip('this mmpretrain install does not ship its tools')
    spec = importlib.util.spec_from_file_location('deit3_converter', script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    vit = _upstream(layer_scale_init_value=0.1)
    official = _official_layout(vit.state_dict())
    theirs = {
        k[len('backbone.'):]: v
        for k, v in module.convert_deit3(official).items()
        if k.startswith('backbone.')
    }
    assert deit_converter(official) == theirs
