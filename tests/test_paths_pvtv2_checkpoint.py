"""The HViT-PVTv2 host reads checkpoints in the official PVTv2 layout
(whai362/PVT ``pvt_v2.py``: ``patch_embed1.proj``, ``block1.0.attn.q``,
``attn.kv``, ``attn.sr``, ``mlp.fc1``, ``mlp.dwconv.dwconv`` ...).

An upstream PVTv2 (mmdet's) is renamed into that layout; a small functional
PVTv2 written from the official module names checks that the renamed
weights mean what the official model means; the host must load them with
no missing key and give the upstream outputs."""
import torch
import torch.nn.functional as F
from mmdet.models.backbones import PyramidVisionTransformerV2

from mmvitaccel.models import HViTPyramidVisionTransformerV2

from .tolerance import assert_rounding_close

TINY = dict(embed_dims=16, num_layers=[2, 1, 2, 1], num_heads=[1, 2, 4, 8])
SR_RATIOS = (8, 4, 2, 1)  # PVTv2's (mmdet's default too)
MLP_RATIOS = (8, 8, 4, 4)
#: the official functional model and the upstream module compute the same
#: in another order (q and kv apart, their in_proj at once ...); compared in
#: float64, the longest chain of dependent sums bounds the rounding: per
#: layer q/kv (C), sr conv (C sr^2 <= 1024), logits and values, proj (C),
#: fc1 (C), dwconv (9), fc2 (m C <= 512), LayerNorms, over 6 layers, and the
#: patch-embedding convs (<= 64 x 9): about 8000, so n = 1e4
OFFICIAL_TERMS = 10_000


def _double(state_dict):
    return {k: v.double() for k, v in state_dict.items()}


def _official_keys():
    """Parameter names of the official PVTv2 of ``TINY`` (without head)."""
    keys = []
    for i, depth in enumerate(TINY['num_layers'], 1):
        keys += [f'patch_embed{i}.{m}.{t}' for m in ('proj', 'norm')
                 for t in ('weight', 'bias')]
        modules = ['norm1', 'attn.q', 'attn.kv', 'attn.proj', 'norm2',
                   'mlp.fc1', 'mlp.dwconv.dwconv', 'mlp.fc2']
        if SR_RATIOS[i - 1] > 1:
            modules += ['attn.sr', 'attn.norm']
        keys += [f'block{i}.{j}.{m}.{t}' for j in range(depth)
                 for m in modules for t in ('weight', 'bias')]
        keys += [f'norm{i}.weight', f'norm{i}.bias']
    return sorted(keys)


def _to_official(state_dict):
    """mmdet ``PyramidVisionTransformerV2`` names -> official names (the
    classifier head is added, as in a released ImageNet checkpoint)."""
    sd, out = dict(state_dict), {}
    for i in range(4):
        s, p = f'layers.{i}.', f'patch_embed{i + 1}.'
        for t in ('weight', 'bias'):
            out[f'{p}proj.{t}'] = sd.pop(f'{s}0.projection.{t}')
            out[f'{p}norm.{t}'] = sd.pop(f'{s}0.norm.{t}')
            out[f'norm{i + 1}.{t}'] = sd.pop(f'{s}2.{t}')
        for j in range(TINY['num_layers'][i]):
            m, b = f'{s}1.{j}.', f'block{i + 1}.{j}.'
            for t in ('weight', 'bias'):
                qkv = sd.pop(f'{m}attn.attn.in_proj_{t}')
                C = qkv.shape[0] // 3
                out[f'{b}attn.q.{t}'] = qkv[:C]
                out[f'{b}attn.kv.{t}'] = qkv[C:]
                out[f'{b}attn.proj.{t}'] = sd.pop(
                    f'{m}attn.attn.out_proj.{t}')
                for name in ('norm1', 'norm2'):
                    out[f'{b}{name}.{t}'] = sd.pop(f'{m}{name}.{t}')
                for name in ('sr', 'norm'):
                    if f'{m}attn.{name}.{t}' in sd:
                        out[f'{b}attn.{name}.{t}'] = sd.pop(
                            f'{m}attn.{name}.{t}')
                fc1, fc2 = (sd.pop(f'{m}ffn.layers.{k}.{t}') for k in (0, 4))
                if t == 'weight':  # 1x1 convs -> linears
                    fc1, fc2 = fc1[..., 0, 0], fc2[..., 0, 0]
                out[f'{b}mlp.fc1.{t}'] = fc1
                out[f'{b}mlp.fc2.{t}'] = fc2
                out[f'{b}mlp.dwconv.dwconv.{t}'] = sd.pop(
                    f'{m}ffn.layers.1.{t}')
    assert not sd, f'not renamed: {sorted(sd)}'
    width = state_dict['layers.3.2.weight'].shape[0]
    out['head.weight'] = torch.randn(10, width)
    out['head.bias'] = torch.randn(10)
    return out


def _layer_norm(x, sd, prefix, eps):
    return F.layer_norm(x, x.shape[-1:], sd[prefix + 'weight'],
                        sd[prefix + 'bias'], eps)


def _linear(x, sd, prefix):
    return F.linear(x, sd[prefix + 'weight'], sd[prefix + 'bias'])


def _attention(x, H, W, sd, p, heads, sr, sr_norm_eps):
    """Official ``Attention``: ``q`` from the tokens, ``k, v`` (``kv``)
    from the ``sr``-strided conv of the map, LayerNorm, softmax."""
    B, N, C = x.shape
    d = C // heads
    q = _linear(x, sd, p + 'q.').view(B, N, heads, d).transpose(1, 2)
    if sr > 1:
        m = x.transpose(1, 2).reshape(B, C, H, W)
        m = F.conv2d(m, sd[p + 'sr.weight'], sd[p + 'sr.bias'], stride=sr)
        x = _layer_norm(m.flatten(2).transpose(1, 2), sd, p + 'norm.',
                        sr_norm_eps)
    k, v = _linear(x, sd, p + 'kv.').view(B, -1, 2, heads,
                                          d).permute(2, 0, 3, 1, 4)
    attn = (q @ k.transpose(-2, -1) * d**-0.5).softmax(-1)
    return _linear((attn @ v).transpose(1, 2).reshape(B, N, C), sd,
                   p + 'proj.')


def _mlp(x, H, W, sd, p):
    """Official ``Mlp``: ``fc1``, 3x3 depth-wise ``dwconv``, GELU, ``fc2``."""
    x = _linear(x, sd, p + 'fc1.')
    B, N, hidden = x.shape
    m = x.transpose(1, 2).reshape(B, hidden, H, W)
    m = F.conv2d(m, sd[p + 'dwconv.dwconv.weight'],
                 sd[p + 'dwconv.dwconv.bias'], padding=1, groups=hidden)
    return _linear(F.gelu(m.flatten(2).transpose(1, 2)), sd, p + 'fc2.')


def _official_pvtv2(sd, x, sr_norm_eps):
    """The four NCHW maps of the official PVTv2 (its detection form) with
    weights in the official names."""
    outs = []
    for i in range(4):
        p = f'patch_embed{i + 1}.'
        kernel = sd[p + 'proj.weight'].shape[-1]
        x = F.conv2d(x, sd[p + 'proj.weight'], sd[p + 'proj.bias'],
                     stride=4 if i == 0 else 2, padding=kernel // 2)
        B, _, H, W = x.shape
        x = _layer_norm(x.flatten(2).transpose(1, 2), sd, p + 'norm.', 1e-6)
        for j in range(TINY['num_layers'][i]):
            b = f'block{i + 1}.{j}.'
            x = x + _attention(
                _layer_norm(x, sd, b + 'norm1.', 1e-6), H, W, sd,
                b + 'attn.', TINY['num_heads'][i], SR_RATIOS[i], sr_norm_eps)
            x = x + _mlp(_layer_norm(x, sd, b + 'norm2.', 1e-6), H, W, sd,
                         b + 'mlp.')
        x = _layer_norm(x, sd, f'norm{i + 1}.', 1e-6)
        x = x.transpose(1, 2).reshape(B, -1, H, W)
        outs.append(x)
    return outs


def _upstream_and_official(tmp_path):
    torch.manual_seed(0)
    upstream = PyramidVisionTransformerV2(**TINY)
    upstream.init_weights()
    with torch.no_grad():  # every parameter away from its init value
        for p in upstream.parameters():
            p.add_(0.05 * torch.randn_like(p))
    upstream.eval()
    official = _to_official(upstream.state_dict())
    path = str(tmp_path / 'pvt_v2_tiny.pth')
    torch.save(official, path)  # released PVTv2 files are bare state dicts
    return upstream, official, path


def test_renamed_weights_are_the_official_layout_and_model(tmp_path):
    """The renamed checkpoint has exactly the official names, and the
    official computation on it gives the upstream outputs. (The official
    ``Attention.norm`` is ``nn.LayerNorm(dim)``, eps 1e-5; mmdet's port uses
    the backbone's 1e-6 there, so the exact comparison uses 1e-6 and the
    official eps is only close.)"""
    upstream, official, _ = _upstream_and_official(tmp_path)
    assert sorted(k for k in official if not k.startswith('head.')) == \
        _official_keys()
    assert official['block1.0.mlp.fc1.weight'].dim() == 2
    upstream.double()
    official = _double(official)
    x = torch.randn(1, 3, 64, 96, dtype=torch.double)
    with torch.no_grad():
        ref = upstream(x)
        exact = _official_pvtv2(official, x, sr_norm_eps=1e-6)
        with_official_eps = _official_pvtv2(official, x, sr_norm_eps=1e-5)
    for a, b, c in zip(exact, with_official_eps, ref):
        assert_rounding_close(a, c, OFFICIAL_TERMS)
        # not rounding: eps + 9e-6 scales the sr norm's outputs by
        # 1 - 9e-6 / (2 var), its inputs' var > 1 here: ~4e-6 relative
        # change, which the 4 stages carry to outputs of scale ~4 (measured
        # 3e-6); 1e-4 leaves room for their gain, a wrong layer moves ~1e-1
        torch.testing.assert_close(b, c, rtol=1e-4, atol=1e-4)


def test_official_layout_loads_into_the_plain_host(tmp_path):
    """hMHSA and cFFN off: every key loads (none missing, unused or
    mismatched; the classifier head is dropped) and the host gives the
    upstream outputs."""
    upstream, official, path = _upstream_and_official(tmp_path)
    host = HViTPyramidVisionTransformerV2(
        arch='b0', **TINY, hmhsa=False, cffn=False,
        init_cfg=dict(type='Pretrained', checkpoint=path))
    host.init_weights()
    report = host.load_report
    assert report['missing'] == [] and report['unused'] == []
    assert report['mismatched'] == [] and report['new'] == []
    assert len(report['loaded']) == len(upstream.state_dict())
    host.eval()
    host.double()
    upstream.double()
    x = torch.randn(2, 3, 64, 96, dtype=torch.double)
    with torch.no_grad():
        outs, ref = host(x), upstream(x)
        official_outs = _official_pvtv2(_double(official), x,
                                        sr_norm_eps=1e-6)
    assert len(outs) == 4
    for a, b, c in zip(outs, ref, official_outs):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # the same modules
        assert_rounding_close(a, c, OFFICIAL_TERMS)


def test_official_layout_initialises_hmhsa_and_cffn(tmp_path):
    """hMHSA on (stages 1-3, even heads) and cFFN: nothing is missing;
    ``Q^``/``K^`` are the first ``h / 2`` heads of the official ``q`` and
    of the key half of ``kv``, ``V`` its value half, ``proj`` as is; only
    cFFN's ``M2`` (``fc2``) is left unused."""
    _, official, path = _upstream_and_official(tmp_path)
    host = HViTPyramidVisionTransformerV2(
        arch='b0', **TINY, init_cfg=dict(type='Pretrained', checkpoint=path))
    host.init_weights()
    report = host.load_report
    assert report['missing'] == [] and report['mismatched'] == []
    assert report['new'] and all('.hallucination.' in k or '.ffn.layers.4.'
                                 in k for k in report['new'])
    assert report['unused'] and all(k.endswith(('ffn.layers.4.weight',
                                                'ffn.layers.4.bias'))
                                    for k in report['unused'])
    own = host.state_dict()
    for i in (1, 2, 3):
        for j in range(TINY['num_layers'][i]):
            src, dst = f'block{i + 1}.{j}.attn.', f'layers.{i}.1.{j}.attn.'
            C = official[src + 'q.weight'].shape[0]
            for t in ('weight', 'bias'):
                kv = official[src + f'kv.{t}']
                assert torch.equal(own[dst + f'q.{t}'],
                                   official[src + f'q.{t}'][:C // 2])
                assert torch.equal(own[dst + f'k.{t}'], kv[:C // 2])
                assert torch.equal(own[dst + f'v.{t}'], kv[C:])
                assert torch.equal(own[dst + f'proj.{t}'],
                                   official[src + f'proj.{t}'])
                if f'{src}sr.{t}' in official:
                    assert torch.equal(own[dst + f'sr.{t}'],
                                       official[src + f'sr.{t}'])
    # the odd-head stage 0 keeps plain attention, loaded whole
    qkv = own['layers.0.1.0.attn.attn.in_proj_weight']
    assert torch.equal(qkv, torch.cat([official['block1.0.attn.q.weight'],
                                       official['block1.0.attn.kv.weight']]))
