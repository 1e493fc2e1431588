"""STViT-DeiT: the cross-attention ViT layer, the backbone's equations,
DeiT weights (mmpretrain and official layouts), errors, FLOPs."""
import importlib.util
import os.path as osp
import sys

import pytest
import torch
import torch.nn.functional as F
from mmpretrain.models import VisionTransformer
from mmpretrain.models.backbones.deit import DistilledVisionTransformer
from mmpretrain.models.backbones.vision_transformer import \
    TransformerEncoderLayer
from mmpretrain.models.utils import resize_pos_embed

import mmvitaccel  # noqa: F401
from mmvitaccel.models import STViTDeiT
from mmvitaccel.models.stvit import CrossAttentionViTLayer
from mmvitaccel.models.utils import deit_converter, deit_state_dict
from mmvitaccel.analysis.flops import count_flops, count_params

from .tolerance import assert_rounding_close, rounding_tol
from .utils import REPO, assert_clear_gradients, random_readout

#: 8 layers so that the default STGM at (4, 5) fits, with 2 layers after it
TINY = dict(embed_dims=64, num_layers=8, num_heads=2, feedforward_channels=128)
LAYER = dict(embed_dims=64, num_heads=4, feedforward_channels=128)
#: float64 rounding through one LAYER: ln1 (64), q/k/v (64), logits
#: (d = 16), softmax and values over <= 12 keys, proj (64), ln2 (64), fc1
#: (64), fc2 (128)
LAYER_TERMS = 64 + 64 + 16 + 2 * 12 + 64 + 64 + 64 + 128
NEW_KEYS = sorted([
    'global_centres', 'ln2.bias', 'ln2.weight', 'pooler.inter.bias',
    'pooler.inter.weight', 'pooler.inter_mix', 'pooler.intra.weight'
])


def _upstream(**kwargs):
    torch.manual_seed(0)
    vit = VisionTransformer(arch=TINY, **kwargs)
    vit.init_weights()
    with torch.no_grad():  # not the init values: a load must copy them
        for p in vit.parameters():
            p.add_(0.1 * torch.randn_like(p))
    vit.eval()  # mmpretrain backbones' train() returns None: no chaining
    return vit


def _ours(vit=None, **kwargs):
    ours = STViTDeiT(arch=TINY, **kwargs)
    ours.init_weights()
    if vit is not None:
        missing, _ = ours.load_state_dict(vit.state_dict(), strict=False)
        assert all(k.startswith(ours.new_parameter_prefixes) for k in missing)
    ours.eval()
    return ours


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
    layer.double()
    ref.double()
    x = torch.randn(2, 10, 64, dtype=torch.double)
    with torch.no_grad():  # q and kv apart vs one qkv: rounding only
        assert_rounding_close(layer.eval()(x, layer.key_values(x)),
                              ref.eval()(x), LAYER_TERMS)


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
    layer = CrossAttentionViTLayer(**LAYER).eval().double()
    query = torch.randn(2, 5, 64, dtype=torch.double)
    keys = torch.randn(2, 12, 64, dtype=torch.double)
    shortcut = torch.randn(2, 5, 64, dtype=torch.double)
    with torch.no_grad():
        out = layer(query, layer.key_values(keys), shortcut=shortcut)
        x = shortcut + _explicit_mha(layer, query, keys)
        assert_rounding_close(out, layer.ffn(layer.ln2(x), identity=x),
                              LAYER_TERMS)
        valid = torch.rand(2, 12) > 0.4
        valid[:, 0] = True
        noisy = torch.where(valid[..., None], keys,
                            100 * torch.randn_like(keys))
        # bit-exact: masked keys get weight 0, the others are the same rows
        torch.testing.assert_close(
            layer(query, layer.key_values(keys), valid),
            layer(query, layer.key_values(noisy), valid), rtol=0, atol=0)
        with pytest.raises(ValueError, match='2 \\* 64 channels'):
            layer(query, keys)


# --- the backbone ------------------------------------------------------------


@pytest.mark.parametrize('kwargs,size,shape', [
    (dict(), (224, 224), (2, 64)),
    (dict(pooling='max', out_type='featmap'), (160, 208), (2, 64, 4, 4)),
    (dict(pooling='avg', out_type='raw', semantic_tokens=25), (96, 112),
     (2, 25, 64)),
    (dict(img_size=(160, 208), out_type='featmap', semantic_tokens=49),
     (160, 208), (2, 64, 7, 7)),
    (dict(with_cls_token=False), (224, 224), (2, 64)),
])
def test_output_shapes(kwargs, size, shape):
    ours = _ours(**kwargs)
    with torch.no_grad():
        outs = ours(torch.randn(2, 3, *size))
    assert len(outs) == 1 and outs[0].shape == shape
    assert torch.isfinite(outs[0]).all()


def test_several_out_indices():
    ours = _ours(out_indices=[5, 6, 7], out_type='raw')
    with torch.no_grad():
        outs = ours(torch.randn(1, 3, 224, 224))
    assert [o.shape for o in outs] == [(1, 16, 64)] * 3
    # only the last output has the final norm: zero mean over channels, up
    # to the rounding of the norm's and the mean's sums of 64 (float32)
    tol = rounding_tol(torch.float32, 2 * 64, float(outs[2].abs().max()))
    assert outs[2].mean(-1).abs().max() < tol < outs[1].mean(-1).abs().max()


def test_frozen_stages_cover_the_stgm_layers():
    ours = STViTDeiT(arch=TINY, frozen_stages=6)
    frozen = {n for n, p in ours.named_parameters() if not p.requires_grad}
    assert {'layers.4.attn.qkv.weight', 'layers.5.ffn.layers.1.bias'} < frozen
    assert not any(n.startswith('layers.6.') for n in frozen)


def test_intra_inter_refuses_other_grids():
    ours = _ours()
    with pytest.raises(ValueError, match='14x14 patch grid'):
        ours(torch.randn(1, 3, 160, 224))


def test_upstream_layers_then_paper_equations():
    """Layers 0-3 are upstream DeiT exactly; then P, STGM-1, STGM-2 and the
    semantic layers follow the paper's equations, written out here with the
    upstream modules and an explicit attention."""
    vit = _upstream().double()
    ours = _ours(vit).double()
    with torch.no_grad():
        torch.nn.init.normal_(ours.global_centres)
    x = torch.randn(2, 3, 224, 224, dtype=torch.double)
    hidden = {}
    for name, model in (('vit', vit), ('ours', ours)):
        model.layers[3].register_forward_hook(
            lambda m, i, o, name=name: hidden.__setitem__(name, o))
    with torch.no_grad():
        vit(x)
        out = ours(x)[0]
        assert torch.equal(hidden['ours'], hidden['vit'])
        X = hidden['vit'][:, 1:]  # (B, 196, C), class token dropped
        # zero-initialised intra/inter pooling = average pooling of the bins
        P = F.adaptive_avg_pool2d(
            X.transpose(1, 2).reshape(2, 64, 14, 14), 4).flatten(2).mT
        L = vit.layers
        S1 = P + _explicit_mha(L[4], P, X)
        S1 = L[4].ffn(L[4].ln2(S1), identity=S1)
        S2 = S1 + _explicit_mha(L[5], S1 + ours.global_centres,
                                torch.cat([S1, X], 1))
        S = L[5].ffn(L[5].ln2(S2), identity=S2)
        S = vit.ln1(L[7](L[6](S)))
        ref = ours.ln2(S.mean(1))
    # float64: patch embedding (768) and 8 layers of ~900 (LAYER_TERMS with
    # up to 16 + 196 keys): n = 1e4
    assert_rounding_close(out, ref, 10_000)


def test_gradients_reach_centres_pooling_and_stgm():
    torch.manual_seed(0)  # weights, input and drop path
    ours = STViTDeiT(arch=TINY, drop_path_rate=0.1)
    ours.init_weights()
    # the STGM layers are built as upstream builds the layers they replace
    vit = VisionTransformer(arch=TINY, drop_path_rate=0.1)
    for i in (4, 5):
        assert ours.layers[i].attn.out_drop.drop_prob == \
            vit.layers[i].attn.out_drop.drop_prob > 0
    ours.train()
    random_readout(ours(torch.randn(2, 3, 224, 224))).backward()
    # the pooling's grid mixing multiplies a projection that starts at
    # zero: its gradient is zero until that projection has moved
    assert_clear_gradients(
        (name, p) for name, p in ours.named_parameters()
        if name.startswith(('pooler.', 'global_centres', 'layers.4.',
                            'layers.5.', 'layers.7.'))
        and name != 'pooler.inter_mix')


@pytest.mark.parametrize('kwargs,match', [
    (dict(semantic_tokens=15), 'perfect square'),
    (dict(semantic_tokens=0), 'perfect square'),
    (dict(semantic_tokens=225), 'do not fit the 14x14 patch grid'),
    (dict(semantic_tokens=64, img_size=(224, 96)), 'do not fit the 14x6'),
    (dict(stgm_layers=(4, 6)), 'two consecutive'),
    (dict(stgm_layers=(7, 8)), 'two consecutive'),
    (dict(stgm_layers=(4, )), 'two consecutive'),
    (dict(out_type='cls_token'), 'drops the class token'),
    (dict(out_type='tokens'), 'unknown out_type'),
    (dict(pooling='median'), 'unknown pooling'),
    (dict(out_indices=[3]), 'after STGM-2'),
    (dict(arch='huge-deit'), 'unknown arch'),
    (dict(arch=dict(embed_dims=64)), 'custom arch'),
])
def test_bad_configs_fail_at_build(kwargs, match):
    args = dict(dict(arch=TINY), **kwargs)
    with pytest.raises(ValueError, match=match):
        STViTDeiT(**args)


def test_short_arch_names_are_deit():
    assert STViTDeiT(arch='tiny').arch_settings == \
        VisionTransformer.arch_zoo['deit-tiny']


# --- weights -----------------------------------------------------------------


def _loaded(checkpoint, **kwargs):
    ours = STViTDeiT(
        arch=TINY,
        init_cfg=dict(type='Pretrained', checkpoint=str(checkpoint)),
        **kwargs)
    ours.init_weights()
    return ours


def test_loads_mmpretrain_deit_classifier(tmp_path):
    vit = _upstream()
    state = {f'backbone.{k}': v for k, v in vit.state_dict().items()}
    state['head.layers.head.weight'] = torch.zeros(10, 64)
    torch.save(dict(state_dict=state, meta=dict(epoch=300)),
               tmp_path / 'deit.pth')
    ours = _loaded(tmp_path / 'deit.pth')
    report = ours.load_report
    assert report['missing'] == [] and report['mismatched'] == []
    assert report['unused'] == [] and sorted(report['new']) == NEW_KEYS
    for key, value in vit.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    # new parameters got their init: zero pooling nets, Gaussian G
    assert ours.pooler.inter.weight.abs().sum() == 0
    assert 0.01 < ours.global_centres.std() < 0.03
    # another input size: the position embedding is resized as upstream
    small = _loaded(tmp_path / 'deit.pth', img_size=(160, 208),
                    pooling='max')
    assert small.load_report['mismatched'] == []
    torch.testing.assert_close(  # the same function: bit-exact
        small.pos_embed,
        resize_pos_embed(vit.pos_embed, (14, 14), (10, 13)), rtol=0, atol=0)


def test_loads_distilled_deit_without_its_distillation_slot(tmp_path):
    torch.manual_seed(0)
    deit = DistilledVisionTransformer(arch=TINY)
    torch.save({f'backbone.{k}': v for k, v in deit.state_dict().items()},
               tmp_path / 'distilled.pth')
    ours = _loaded(tmp_path / 'distilled.pth')
    assert ours.load_report['unused'] == ['dist_token']
    assert ours.load_report['missing'] == []
    pos = deit.pos_embed
    assert torch.equal(ours.pos_embed, torch.cat([pos[:, :1], pos[:, 2:]], 1))


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


def test_loads_official_deit_checkpoint(tmp_path):
    vit = _upstream(layer_scale_init_value=0.1)
    torch.save(dict(model=_official_layout(vit.state_dict())),
               tmp_path / 'official.pth')
    ours = _loaded(tmp_path / 'official.pth', layer_scale_init_value=0.1)
    for key, value in vit.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    assert ours.load_report['missing'] == []
    assert ours.load_report['unused'] == []
    assert sorted(ours.load_report['new']) == NEW_KEYS


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


def test_convert_checkpoint_tool(tmp_path, monkeypatch, capsys):
    vit = _upstream()
    torch.save(dict(state_dict={f'backbone.{k}': v
                                for k, v in vit.state_dict().items()}),
               tmp_path / 'deit.pth')
    config = tmp_path / 'tiny_stvit_deit.py'
    config.write_text(
        f"_base_ = '{REPO}/configs/stvit_deit_s_in1k.py'\n"
        f'model = dict(backbone=dict(arch=dict(_delete_=True, **{TINY!r})),'
        ' head=dict(in_channels=64))\n')
    spec = importlib.util.spec_from_file_location(
        'convert_checkpoint',
        osp.join(REPO, 'tools', 'model_converters', 'convert_checkpoint.py'))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    monkeypatch.setattr(sys, 'argv', [
        'convert_checkpoint.py',
        str(config),
        str(tmp_path / 'deit.pth'),
        str(tmp_path / 'stvit.pth')
    ])
    tool.main()
    out = capsys.readouterr().out
    assert 'missing: 0' in out and f'new: {len(NEW_KEYS)}' in out
    assert 'unused: 0' in out and 'mismatched: 0' in out
    state = torch.load(tmp_path / 'stvit.pth')['state_dict']
    for key, value in vit.state_dict().items():
        assert torch.equal(state[f'backbone.{key}'], value), key
    assert set(state) == {f'backbone.{k}' for k in _ours().state_dict()}


# --- full size ---------------------------------------------------------------


def test_full_size_deit_small():
    """STViT-DeiT-S at 224: (B, C) features; FLOPs as the closed form of the
    paper's layout, which is 58% fewer than DeiT-S (the paper's -58%)."""
    ours = STViTDeiT(arch='deit-small')
    deit = VisionTransformer(arch='deit-small')
    x = torch.randn(1, 3, 224, 224)
    ours.eval()
    with torch.no_grad():
        assert ours(x)[0].shape == (1, 384)
    C, N, S, n_b = 384, 197, 16, 16

    def layer(q, k=None):
        """A pre-norm layer, q queries attending to k keys (None: self)."""
        norms = 5 * C * (2 * q + (0 if k is None else k))  # ln1 (q, k), ln2
        k = q if k is None else k
        return (norms + q * C * C + 2 * k * C * C  # W_q, W_kv
                + 2 * q * k * C  # q k^T, attn v
                + q * C * C + 8 * q * C * C)  # proj, FFN (ratio 4)

    expected = (196 * C * 3 * 16 * 16  # patch embedding
                + 4 * layer(N)  # DeiT layers on [cls; X]
                + S * n_b * C + S * C * n_b  # f_intra, f_inter's projection
                + S * S * n_b  # f_inter's mixing across the grid
                + layer(S, 196)  # STGM-1: P attends to X
                + layer(S, S + 196)  # STGM-2: S1 + G attends to [S1; X]
                + 6 * layer(S)  # semantic layers
                + 5 * S * C + 5 * C)  # final ln1; ln2 after pooling
    ours_flops = count_flops(ours, x).total
    deit_flops = count_flops(deit, x).total
    assert ours_flops == expected
    assert 0.57 < 1 - ours_flops / deit_flops < 0.59
    # the additions are the pooling nets, G and the norm after pooling
    assert count_params(ours) - count_params(deit) == \
        C + (C * n_b + n_b) + S * S + S * C + 2 * C


@pytest.mark.parametrize('tokens', [25, 36, 49])
def test_token_variant_configs(tokens):
    """The paper's 25/36/49-token STViT-DeiT-S: the 16-token recipe with
    only the number of semantic tokens changed; the backbone builds."""
    from mmengine.config import Config
    base = Config.fromfile(f'{REPO}/configs/stvit_deit_s_in1k.py')
    cfg = Config.fromfile(f'{REPO}/configs/stvit_deit_s_{tokens}tokens_in1k.py')
    assert cfg.model.backbone.semantic_tokens == tokens
    base.model.backbone.semantic_tokens = tokens
    assert cfg.model.to_dict() == base.model.to_dict()
    assert cfg.optim_wrapper.to_dict() == base.optim_wrapper.to_dict()
    args = {k: v for k, v in cfg.model.backbone.items() if k != 'type'}
    model = STViTDeiT(**{**args, 'arch': TINY})
    assert model.pooler.inter_mix.shape == (tokens, tokens)
