"""STViT-DeiT: the cross-attention ViT layer."""
import pytest
import torch
from mmpretrain.models.backbones.vision_transformer import \
    TransformerEncoderLayer

from mmvitaccel.models.layers import CrossAttentionViTLayer

LAYER = dict(embed_dims=64, num_heads=4, feedforward_channels=128)


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
