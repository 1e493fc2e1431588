"""hMHSA + cFFN layers and hosts (DeiT, PVTv2, Swin): parity with upstream
when switched off, deploy == training form, checkpoints, errors, FLOPs."""
import pytest
import torch
import torch.nn as nn
from mmdet.models.backbones import PyramidVisionTransformerV2
from mmpretrain.models import SwinTransformer, VisionTransformer

import mmvitaccel  # noqa: F401
from mmvitaccel.models import (HViTDeiT, HViTPyramidVisionTransformerV2,
                               HViTSwinTransformer)
from mmvitaccel.models.hvit import (HallucinatedSRA, HallucinatedWindowMSA,
                                    HViTEncoderLayer)
from mmvitaccel.ops import (CompactLinear, RepLinear, cffn_flops, ffn_flops,
                            hmhsa_flops, mhsa_flops)
from mmvitaccel.analysis.flops import count_flops

from .tolerance import assert_rounding_close
from .utils import assert_clear_gradients, assert_twin_matches, random_readout

TINY_DEIT = dict(embed_dims=64, num_layers=2, num_heads=4,
                 feedforward_channels=256)
TINY_PVT = dict(arch='b0', embed_dims=16, num_layers=[1, 1, 1, 1],
                num_heads=[1, 2, 4, 8])
TINY_SWIN = dict(embed_dims=32, depths=[2, 2, 2, 2], num_heads=[2, 2, 4, 8])
#: accumulation length through the longest tiny host (for
#: :mod:`tests.tolerance`), Swin: 8 blocks of width C = 32..256 with about
#: 7 C each (q/k/v, proj, fc1, cFFN or fc2 of 4 C), 16-key windows, 3x3
#: taps, and the patch merges of 4 C: ~8000, so n = 1e4 (PVTv2 with its sr
#: convs and DeiT are shorter)
HOST_TERMS = 10_000


def _perturbed(model):
    """Parameters away from their init values, so that a load must copy."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.eval()
    return model


def _train_bn(model, x, steps=2):
    """Give the cFFN BN layers non-trivial running statistics and affine
    parameters."""
    model.train()
    with torch.no_grad():
        for _ in range(steps):
            model(x + torch.randn_like(x))
        for m in model.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    model.eval()


HOSTS = {
    'deit': (lambda **kw: HViTDeiT(arch=TINY_DEIT, **kw),
             lambda: VisionTransformer(arch=TINY_DEIT), (2, 3, 64, 48)),
    'pvt': (lambda **kw: HViTPyramidVisionTransformerV2(**TINY_PVT, **kw),
            lambda: PyramidVisionTransformerV2(
                **{k: v for k, v in TINY_PVT.items() if k != 'arch'}),
            (2, 3, 96, 64)),
    # windows of 4 on a 128 input: 32/16/8/4 maps, shifted windows in 1-3
    'swin': (lambda **kw: HViTSwinTransformer(
        arch=TINY_SWIN, window_size=4, **kw),
             lambda: SwinTransformer(
                 arch=TINY_SWIN, window_size=4, out_indices=(3, )),
             (2, 3, 128, 128)),
}


@pytest.mark.parametrize('host', sorted(HOSTS))
def test_switched_off_equals_upstream(host):
    ours_fn, upstream_fn, shape = HOSTS[host]
    kwargs = dict(out_indices=(3, )) if host == 'swin' else {}
    upstream = _perturbed(upstream_fn())
    ours = ours_fn(hmhsa=False, cffn=False, **kwargs)
    assert list(ours.state_dict()) == list(upstream.state_dict())
    ours.load_state_dict(upstream.state_dict())
    ours.eval()
    x = torch.randn(*shape)
    with torch.no_grad():
        for a, b in zip(ours(x), upstream(x)):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize('host', sorted(HOSTS))
def test_deploy_form_equals_training_form(host):
    ours_fn, _, shape = HOSTS[host]
    torch.manual_seed(0)
    model = ours_fn().double()
    x = torch.randn(*shape, dtype=torch.double)
    _train_bn(model, x)
    assert any(isinstance(m, RepLinear) for m in model.modules())
    with torch.no_grad():
        ref = model(x)
        model.switch_to_deploy()
        out = model(x)
    assert model.deploy
    assert not any(isinstance(m, nn.BatchNorm1d) for m in model.modules())
    for a, b in zip(out, ref):  # float64: BN and branches folded
        assert_rounding_close(a, b, HOST_TERMS)
    # a model built with deploy=True has exactly these parameters
    assert_twin_matches(ours_fn(deploy=True).double(), model, x, ref,
                        HOST_TERMS)


@pytest.mark.parametrize('host', sorted(HOSTS))
def test_gradients_reach_new_parameters(host):
    ours_fn, _, shape = HOSTS[host]
    torch.manual_seed(0)
    model = ours_fn()
    model.train()
    random_readout(model(torch.randn(*shape))).backward()
    # U's BatchNorm biases shift U's output by a constant, which V's
    # BatchNorms (training mode: batch mean subtracted) remove: their
    # gradient is zero up to rounding
    new = [(n, p) for n, p in model.named_parameters()
           if ('.hallucination.' in n or '.u.' in n or '.v.weights' in n)
           and not ('.u.norms.' in n and n.endswith('.bias'))]
    assert_clear_gradients(new)


def test_which_layers_get_hmhsa_and_odd_heads_are_refused():
    pvt = HViTPyramidVisionTransformerV2(**TINY_PVT, hmhsa=True)
    assert pvt.hmhsa_stages == (1, 2, 3)
    b1 = HViTPyramidVisionTransformerV2(arch='b1', num_layers=[1, 1, 1, 1])
    assert b1.hmhsa_stages == (1, 3)  # heads [1, 2, 5, 8]
    assert isinstance(b1.layers[1][1][0].attn, HallucinatedSRA)
    assert not isinstance(b1.layers[2][1][0].attn, HallucinatedSRA)
    with pytest.raises(ValueError, match='even number of heads.*stage 2'):
        HViTPyramidVisionTransformerV2(
            arch='b1', num_layers=[1, 1, 1, 1], hmhsa=[1, 2])
    swin = HViTSwinTransformer(
        arch=dict(embed_dims=24, depths=[1, 1, 1, 1],
                  num_heads=[3, 6, 12, 24]))
    assert swin.hmhsa_stages == (1, 2, 3)
    with pytest.raises(ValueError, match='even number of heads'):
        HViTSwinTransformer(
            arch=dict(embed_dims=24, depths=[1, 1, 1, 1],
                      num_heads=[3, 6, 12, 24]), hmhsa=[0])
    with pytest.raises(ValueError, match='even number of heads'):
        HViTDeiT(arch='deit-tiny')  # 3 heads
    deit = HViTDeiT(arch=TINY_DEIT, hmhsa=[1], cffn=[0])
    assert deit.layers[0].hmhsa is False and deit.layers[1].hmhsa is True
    assert isinstance(deit.layers[0].ffn.layers[1], CompactLinear)
    assert isinstance(deit.layers[1].ffn.layers[1], nn.Linear)
    with pytest.raises(ValueError, match='out of range'):
        HViTDeiT(arch=TINY_DEIT, cffn=[5])


def test_any_input_size():
    deit = HViTDeiT(arch=TINY_DEIT, img_size=64, out_type='featmap')
    deit.eval()
    with torch.no_grad():
        assert deit(torch.randn(1, 3, 80, 48))[0].shape == (1, 64, 5, 3)
    pvt = HViTPyramidVisionTransformerV2(**TINY_PVT)
    pvt.eval()
    with torch.no_grad():
        outs = pvt(torch.randn(1, 3, 100, 70))
    assert isinstance(outs, tuple)
    assert [o.shape[-2:] for o in outs] == [(25, 18), (13, 9), (7, 5), (4, 3)]
    # Swin: windows padded inside each stage, small maps padded as upstream
    # does with pad_small_map (without it upstream refuses this size)
    from mmpretrain.models import SwinTransformer
    arch = dict(embed_dims=24, depths=[2, 2, 2, 2], num_heads=[2, 4, 8, 16])
    kwargs = dict(arch=arch, out_indices=(0, 1, 2, 3), pad_small_map=True)
    swin = HViTSwinTransformer(**kwargs)
    upstream = SwinTransformer(**kwargs)
    swin.eval()
    upstream.eval()
    x = torch.randn(1, 3, 100, 70)
    with torch.no_grad():
        outs = swin(x)
        assert [o.shape for o in outs] == [o.shape for o in upstream(x)]
    assert all(torch.isfinite(o).all() for o in outs)


def _save(tmp_path, model, prefix=''):
    path = str(tmp_path / 'host.pth')
    torch.save(dict(state_dict={prefix + k: v
                                for k, v in model.state_dict().items()}),
               path)
    return path


@pytest.mark.parametrize('host', sorted(HOSTS))
def test_loads_the_host_checkpoint_with_a_report(host, tmp_path):
    ours_fn, upstream_fn, shape = HOSTS[host]
    upstream = _perturbed(upstream_fn())
    ckpt = _save(tmp_path, upstream, prefix='backbone.')
    ours = ours_fn(init_cfg=dict(type='Pretrained', checkpoint=ckpt))
    ours.init_weights()
    report = ours.load_report
    assert report['missing'] == [] and report['mismatched'] == []
    assert report['new'] and all(
        '.hallucination.' in k or '.ffn.layers.' in k for k in report['new'])
    # the upstream M2 of every cFFN is the only thing left unused
    assert report['unused'] and all('ffn.layers.' in k
                                    for k in report['unused'])
    up = upstream.state_dict()
    own = ours.state_dict()
    # Q^/K^ are the first h/2 heads of the pretrained Q/K, V is whole
    if host == 'deit':
        src, dst = 'layers.0.attn.qkv.', 'layers.0.attn.'
    elif host == 'pvt':
        src, dst = 'layers.1.1.0.attn.attn.in_proj_', 'layers.1.1.0.attn.'
        assert torch.equal(own[dst + 'proj.weight'],
                           up['layers.1.1.0.attn.attn.out_proj.weight'])
    else:
        src = 'stages.1.blocks.0.attn.w_msa.qkv.'
        dst = 'stages.1.blocks.0.attn.w_msa.'
    w = up[src + 'weight']
    C = w.shape[0] // 3
    assert torch.equal(own[dst + 'q.weight'], w[:C // 2])  # copies
    assert torch.equal(own[dst + 'k.weight'], w[C:C + C // 2])
    assert torch.equal(own[dst + 'v.weight'], w[2 * C:])


def test_vit_layer_flops_match_closed_formulas():
    C, h, m, grid = 64, 4, 4, (6, 5)
    N = 1 + grid[0] * grid[1]
    layer = HViTEncoderLayer(
        embed_dims=C, num_heads=h, feedforward_channels=m * C, deploy=True)
    counted = count_flops(layer, (torch.randn(1, N, C), grid))
    norms = 2 * 5 * N * C  # two layer norms, mmengine's 5 * numel
    assert counted.total == hmhsa_flops(N, C, h, num_extra=1) + \
        cffn_flops(N, C, m * C) + norms
    plain = HViTEncoderLayer(
        embed_dims=C, num_heads=h, feedforward_channels=m * C, hmhsa=False,
        cffn=False)
    assert count_flops(plain, torch.randn(1, N, C)).total == \
        mhsa_flops(N, C) + ffn_flops(N, C, m * C) + norms


@pytest.mark.parametrize('sr', [1, 2, 4])
def test_sra_flops_match_closed_formulas(sr):
    C, h, H, W = 32, 2, 8, 12
    attn = HallucinatedSRA(C, h, sr_ratio=sr)
    counted = count_flops(attn, (torch.randn(1, H * W, C), (H, W)))
    n_kv = (H // sr) * (W // sr)
    reduce = 0 if sr == 1 else n_kv * C * C * sr * sr + 5 * n_kv * C
    assert counted.total == hmhsa_flops(H * W, C, h, n_kv=n_kv) + reduce


def test_window_msa_flops_and_mask():
    C, h, w, nW = 32, 4, 7, 3
    attn = HallucinatedWindowMSA(C, (w, w), h)
    x = torch.randn(2 * nW, w * w, C)
    assert count_flops(attn, x).total == 2 * nW * hmhsa_flops(w * w, C, h)
    # a key masked out in one window gets no weight there, in any head
    mask = torch.zeros(nW, w * w, w * w)
    mask[1, :, 3] = -1e4
    attn.eval()
    with torch.no_grad():
        out = attn(x, mask)
        x2 = x.clone()
        x2[[1, 1 + nW], 3] += 5.0  # change the masked key in window 1
        out2 = attn(x2, mask)
    # only that key's own query row may change, other rows ignore it:
    # bit-exact, its weight exp(-1e4) is 0 and IHH sees a zero in its place
    keep = torch.ones(w * w, dtype=torch.bool)
    keep[3] = False
    torch.testing.assert_close(out[[1, 1 + nW]][:, keep],
                               out2[[1, 1 + nW]][:, keep], rtol=0, atol=0)


def test_full_size_deit_s_flops_cross_check():
    """DeiT-S at 224: counted FLOPs saved == 12 x the closed formulas."""
    x = torch.randn(1, 3, 224, 224)
    base = count_flops(HViTDeiT(hmhsa=False, cffn=False), x).total
    both = count_flops(HViTDeiT(deploy=True), x).total
    N, C, h = 197, 384, 6
    saved = 12 * (mhsa_flops(N, C) - hmhsa_flops(N, C, h, num_extra=1) +
                  ffn_flops(N, C, 4 * C) - cffn_flops(N, C, 4 * C))
    assert base - both == saved
    assert 0.10 < saved / base < 0.40


def test_full_size_pvtv2_b1_flops_and_params_cross_check():
    """PVTv2-b1 at 224: what the counter says hMHSA (stages 2, 4) and cFFN
    (all stages) save equals the closed formulas summed over the layers."""
    from mmvitaccel.ops import cffn_params, ffn_params, hmhsa_params, \
        mhsa_params
    from mmvitaccel.analysis.flops import count_params
    x = torch.randn(1, 3, 224, 224)
    base = HViTPyramidVisionTransformerV2(hmhsa=False, cffn=False)
    both = HViTPyramidVisionTransformerV2(deploy=True)
    saved_flops = count_flops(base, x).total - count_flops(both, x).total
    saved_params = count_params(base) - count_params(both)
    flops = params = 0
    # (side, C, heads, sr, mlp ratio) of the four stages; 2 layers each
    for i, (side, c, h, sr, m) in enumerate([(56, 64, 1, 8, 8),
                                              (28, 128, 2, 4, 8),
                                              (14, 320, 5, 2, 4),
                                              (7, 512, 8, 1, 4)]):
        n, n_kv = side * side, (side // sr)**2
        flops += 2 * (ffn_flops(n, c, m * c) - cffn_flops(n, c, m * c))
        params += 2 * (ffn_params(c, m * c) - cffn_params(c, m * c))
        if i in both.hmhsa_stages:
            flops += 2 * (mhsa_flops(n, c, n_kv) - hmhsa_flops(n, c, h, n_kv))
            params += 2 * (mhsa_params(c) - hmhsa_params(c, h))
    assert both.hmhsa_stages == (1, 3)
    assert saved_flops == flops and saved_params == params


def test_deit_host_fine_tunes_from_its_own_checkpoint_at_another_size(
        tmp_path):
    """An hMHSA/cFFN classifier checkpoint (training form) initialises the
    same backbone at a larger input: nothing new or missing, the position
    embedding resized, hMHSA and cFFN weights copied."""
    trained = _perturbed(HViTDeiT(arch=TINY_DEIT, img_size=64))
    ckpt = _save(tmp_path, trained, prefix='backbone.')
    big = HViTDeiT(arch=TINY_DEIT, img_size=96,
                   init_cfg=dict(type='Pretrained', checkpoint=ckpt))
    big.init_weights()
    report = big.load_report
    assert report['new'] == report['missing'] == report['unused'] == []
    assert report['mismatched'] == []
    assert big.pos_embed.shape[1] == 1 + 6 * 6
    for key in ('layers.1.attn.hallucination.ihh.conv.weight',
                'layers.1.ffn.layers.1.u.weights.1',
                'layers.1.ffn.layers.1.v.norms.0.running_var'):
        assert torch.equal(big.state_dict()[key], trained.state_dict()[key])
