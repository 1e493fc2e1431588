"""Paths no other test takes: gradient checkpointing (``with_cp``), frozen
stages, STViT-R without padding masks, and the error paths of the
restoring neck, the cFFN builder and the hMHSA layers."""
import pytest
import torch
import torch.nn as nn
import torch.utils.checkpoint

from mmvitaccel.models import STViTSwinTransformer3D  # before mmaction
from mmvitaccel.models import (DGSSASwinTransformer, HViTDeiT,
                               HViTSwinTransformer, STViTRSwinTransformer,
                               STViTSwinTransformer, TokenRestoreNeck)  #noqa: I100
from mmvitaccel.models.stvit import dumbbell_swin_stage
from mmvitaccel.models.hvit import (HallucinatedMultiheadAttention,
                                    compact_ffn, resolve_hmhsa_stages)
from mmvitaccel.models.hvit.hmhsa_attention import square_grid

from .tolerance import assert_rounding_close
from .utils import assert_padding_invariant

TINY_SWIN = dict(embed_dims=32, num_heads=(1, 2, 4, 8), drop_path_rate=0.)

#: name -> (builder taking extra kwargs, input shape); drop path off so
#: that two runs of the same weights agree
BACKBONES = {
    'stvit_swin': (lambda **kw: STViTSwinTransformer(
        **TINY_SWIN, depths=(1, 1, 4, 1), stgm_index=1, pooling='intra_inter',
        global_centres=True, **kw), (2, 3, 96, 80)),
    'stvit_r_swin': (lambda **kw: STViTRSwinTransformer(
        **TINY_SWIN, depths=(1, 1, 6, 1), **kw), (2, 3, 96, 80)),
    'dgssa_swin': (lambda **kw: DGSSASwinTransformer(
        **TINY_SWIN, depths=(2, 2, 2, 1), static_blocks=3,
        static_init='local', **kw), (2, 3, 96, 80)),
    'stvit_swin3d': (lambda **kw: STViTSwinTransformer3D(
        arch=dict(embed_dims=32, depths=[1, 1, 4, 1], num_heads=[1, 2, 4, 8]),
        pretrained2d=False, window_size=(2, 7, 7), stgm_index=1,
        drop_path_rate=0., **kw), (1, 3, 4, 64, 64)),
    # explicit hMHSA, the form Swin-T runs at 224 (its 7x7 windows); the
    # 4x4 windows here would choose the fused form, below
    'hvit_swin': (lambda **kw: HViTSwinTransformer(
        arch=dict(embed_dims=32, depths=[2, 2, 2, 2], num_heads=[2, 2, 4, 8]),
        window_size=4, drop_path_rate=0., out_indices=(3, ),
        hmhsa_form='explicit', **kw), (2, 3, 128, 128)),
    'hvit_swin_fused': (lambda **kw: HViTSwinTransformer(
        arch=dict(embed_dims=32, depths=[2, 2, 2, 2], num_heads=[2, 2, 4, 8]),
        window_size=4, drop_path_rate=0., out_indices=(3, ),
        hmhsa_form='fused', **kw), (2, 3, 128, 128)),
}
#: the checkpointed path need not be bit-exact (the fused hMHSA's SDPA picks
#: another CPU kernel without grad, as the checkpoint's first forward runs;
#: the weight gradients' reductions may be ordered otherwise on another
#: CPU), so the comparison runs in float64 within rounding: the longest
#: chain of dependent sums, forward and backward through <= 9 blocks of width
#: C <= 256 (about 7 C each: qkv, proj, fc1, fc2 of 4 C) and the patch
#: merges (~ 2 x 8000), plus a weight gradient's reduction over <= 2 x 32 x
#: 32 positions, is below n = 5e4: 2 n u = 5.6e-12 of the scale
CKPT_TERMS = 50_000

#: the blocks of ours whose checkpointed forward must be taken
OWN_BLOCKS = {
    'stvit_swin': {'CrossAttentionSwinBlock'},
    'stvit_r_swin': {'CrossAttentionSwinBlock', 'MaskedWindowSwinBlock'},
    'stvit_swin3d': {'CrossAttentionSwinBlock3D'},
}


def _outputs_and_grads(model, x):
    model.train()
    x = x.clone().requires_grad_()
    outs = model(x)
    sum((o * torch.linspace(-1, 1, o.numel(), dtype=o.dtype).view_as(o)).sum()
        for o in outs).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()
             if p.grad is not None}
    return [o.detach() for o in outs], grads, x.grad


@pytest.mark.parametrize('name', sorted(BACKBONES))
def test_checkpointing_gives_the_same_outputs_and_gradients(
        name, monkeypatch):
    build, shape = BACKBONES[name]
    torch.manual_seed(0)
    plain = build()
    plain.init_weights()
    with torch.no_grad():  # move new parameters (pooling, G) off zero
        for p in plain.parameters():
            p.add_(0.02 * torch.randn_like(p))
    ckpt = build(with_cp=True)
    ckpt.load_state_dict(plain.state_dict())
    plain.double()
    ckpt.double()
    x = torch.randn(*shape, dtype=torch.double)
    ref = _outputs_and_grads(plain, x)

    checkpointed = []
    original = torch.utils.checkpoint.checkpoint

    def spy(function, *args, **kwargs):
        checkpointed.append(function.__qualname__.split('.')[0])
        return original(function, *args, **kwargs)

    monkeypatch.setattr(torch.utils.checkpoint, 'checkpoint', spy)
    out = _outputs_and_grads(ckpt, x)
    assert checkpointed, 'with_cp=True checkpointed nothing'
    assert OWN_BLOCKS.get(name, set()) <= set(checkpointed)
    for a, b in zip(out[0], ref[0]):
        assert_rounding_close(a, b, CKPT_TERMS, msg='output')
    assert out[1].keys() == ref[1].keys()
    # (some gradients nearly cancel, so the scale is the largest of all)
    scale = max(float(g.abs().max()) for g in ref[1].values())
    for key in ref[1]:
        assert_rounding_close(out[1][key], ref[1][key], CKPT_TERMS, scale,
                              msg=key)
    assert_rounding_close(out[2], ref[2], CKPT_TERMS, msg='input gradient')


# --- frozen stages -----------------------------------------------------------


def _check_frozen(model, frozen, x):
    """After ``.train()``: ``frozen`` (name prefixes) have requires_grad
    False, get no gradient and stay in eval mode (BatchNorm statistics
    included); every other parameter trains."""
    model.train()
    is_frozen = {n: n.startswith(frozen) for n, _ in model.named_parameters()}
    assert any(is_frozen.values()) and not all(is_frozen.values())
    for n, p in model.named_parameters():
        assert p.requires_grad != is_frozen[n], n
    for n, m in model.named_modules():
        if n and n.startswith(frozen):
            assert not m.training, n
    stats = {n: b.clone() for n, b in model.named_buffers()
             if n.startswith(frozen) and 'running' in n}
    sum(o.square().mean() for o in model(x)).backward()
    for n, p in model.named_parameters():
        if is_frozen[n]:
            assert p.grad is None, n
    assert any(p.grad is not None and p.grad.abs().sum() > 0
               for n, p in model.named_parameters() if not is_frozen[n])
    for n, b in stats.items():
        assert torch.equal(b, dict(model.named_buffers())[n]), n


def test_frozen_stages_of_stvit_swin_cover_the_semantic_stage():
    """mmdet's count: ``frozen_stages=3`` freezes the patch embedding and
    stages 0-2, the semantic stage with its STGM, learnable pooling, ``G``
    and ``expand``."""
    build, shape = BACKBONES['stvit_swin']
    model = build(frozen_stages=3, out_indices=(2, 3))
    frozen = ('patch_embed.', 'stages.0.', 'stages.1.', 'stages.2.',
              'norm2.')
    _check_frozen(model, frozen, torch.randn(*shape))
    assert not model.stages[2].poolers[0].intra.weight.requires_grad
    assert not model.stages[2].global_centres[0].requires_grad
    assert model.stages[3].blocks[0].training


def test_frozen_stages_of_stvit_r_swin_cover_the_dumbbell_units():
    build, shape = BACKBONES['stvit_r_swin']
    model = build(frozen_stages=3, out_indices=(3, ))
    _check_frozen(model, ('patch_embed.', 'stages.0.', 'stages.1.',
                          'stages.2.'), torch.randn(*shape))


def test_frozen_stages_of_dgssa_swin_cover_the_static_logits():
    build, shape = BACKBONES['dgssa_swin']
    model = build(frozen_stages=1, out_indices=(3, ))
    _check_frozen(model, ('patch_embed.', 'stages.0.'), torch.randn(*shape))
    static = model.stages[0].blocks[1].attn.w_msa.static_logits
    assert not static.requires_grad
    assert model.stages[1].blocks[0].attn.w_msa.static_logits.requires_grad


def test_frozen_stages_of_hvit_swin_keep_cffn_statistics():
    """mmpretrain's count: ``frozen_stages=1`` freezes the patch embedding
    and stages 0-1, hMHSA filters and cFFN (BatchNorm in eval) included."""
    build, shape = BACKBONES['hvit_swin']
    model = build(frozen_stages=1)
    _check_frozen(model, ('patch_embed.', 'stages.0.', 'stages.1.'),
                  torch.randn(*shape))
    assert any(isinstance(m, nn.BatchNorm1d)
               for m in model.stages[1].modules())


def test_frozen_stages_of_hvit_deit_stay_frozen_in_train_mode():
    """The frozen layers stay in eval mode after ``.train()`` (upstream ViT
    sets it once, in ``__init__``): otherwise their cFFN BatchNorm
    statistics would move while their weights are frozen."""
    model = HViTDeiT(arch=dict(embed_dims=64, num_layers=2, num_heads=4,
                               feedforward_channels=256), img_size=64,
                     frozen_stages=1)
    frozen = ('patch_embed.', 'layers.0.', 'cls_token', 'pos_embed')
    _check_frozen(model, frozen, torch.randn(2, 3, 64, 64))
    assert any(isinstance(m, nn.BatchNorm1d)
               for m in model.layers[0].modules())
    assert model.layers[1].training
    model.eval()
    assert not model.layers[1].training


# --- STViT-R without padding masks --------------------------------------------


def _stvit_r_pair():
    torch.manual_seed(0)
    masked = STViTRSwinTransformer(**TINY_SWIN, depths=(1, 1, 6, 1))
    masked.init_weights()
    with torch.no_grad():  # non-trivial norms: padding is not neutral
        for p in masked.parameters():
            p.add_(0.05 * torch.randn_like(p))
    plain = STViTRSwinTransformer(**TINY_SWIN, depths=(1, 1, 6, 1),
                                  mask_padding=False)
    plain.load_state_dict(masked.state_dict())
    masked.eval()
    plain.eval()
    return masked, plain


def test_mask_padding_off_differs_only_where_there_is_padding():
    """``mask_padding=False`` (upstream Swin's padding in the units' image
    blocks): any size runs; without padding it is the masked model exactly,
    with padding the dumbbell stage and the stage after it differ."""
    masked, plain = _stvit_r_pair()
    assert not plain.stages[2].mask_padding
    x = torch.randn(1, 3, 112, 112)  # stage 3: 7x7, one window, no padding
    with torch.no_grad():
        for a, b in zip(plain(x), masked(x)):
            assert torch.equal(a, b)
    x = torch.randn(2, 3, 150, 100)  # stage 3: 10x7, padded to 14x7
    with torch.no_grad():
        outs, ref = plain(x), masked(x)
    assert [o.shape for o in outs] == [o.shape for o in ref]
    assert all(torch.isfinite(o).all() for o in outs)
    for a, b in zip(outs[:2], ref[:2]):  # stages before the units
        assert torch.equal(a, b)
    # seeing the padding moves these outputs by ~7% of their largest value;
    # float32 rounding alone would move them by ~1e-6 of it
    for a, b in zip(outs[2:], ref[2:]):
        assert (a - b).abs().max() > 1e-2 * b.abs().max()


def test_mask_padding_off_depends_on_the_padding(monkeypatch):
    """The documented trade: only ``mask_padding=True`` is padding
    invariant."""
    masked, plain = _stvit_r_pair()
    x = torch.randn(1, 3, 150, 100)
    assert_padding_invariant(masked, x, dumbbell_swin_stage, monkeypatch)
    with pytest.raises(AssertionError):
        assert_padding_invariant(plain, x, dumbbell_swin_stage, monkeypatch)


# --- error paths -------------------------------------------------------------


def test_token_restore_neck_errors_name_the_parameter():
    with pytest.raises(ValueError, match='rescales'):
        TokenRestoreNeck(32, rescales=(4, 2, 1))
    with pytest.raises(ValueError, match='rescales'):
        TokenRestoreNeck(32, rescales=(8, 4, 2, 1))
    neck = TokenRestoreNeck(32, norm_cfg=dict(type='BN'))
    neck.eval()
    maps = [torch.randn(1, 32, 4, 4)] * 3
    with pytest.raises(ValueError, match=r'inputs.*4 .*rescales.*got 3'):
        neck(maps)
    assert [o.shape[-1] for o in neck(maps + maps[:1])] == [16, 8, 4, 2]


class _FFN(nn.Module):

    def __init__(self, *layers):
        super().__init__()
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x)


@pytest.mark.parametrize('ffn, message', [
    (nn.Linear(8, 8), r'ffn.*`layers` Sequential'),
    (_FFN(nn.GELU(), nn.Dropout()), r'ffn.*no linear layer'),
    (_FFN(nn.Conv2d(8, 32, 1), nn.Conv2d(32, 32, 3, groups=32)),
     r'ffn.*not a linear map'),
    (_FFN(nn.Linear(8, 32)), r'ffn.*hidden-to-output'),
    (_FFN(nn.Linear(32, 8), nn.GELU(), nn.Linear(8, 32)),
     r'ffn.*hidden-to-output'),
])
def test_cffn_refuses_what_it_cannot_factor(ffn, message):
    with pytest.raises(ValueError, match=message):
        compact_ffn(ffn)


def test_cffn_factors_an_expanding_ffn():
    ffn = _FFN(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8))
    compact_ffn(ffn)
    assert ffn(torch.randn(2, 5, 8)).shape == (2, 5, 8)


def test_hmhsa_errors_name_the_parameter():
    with pytest.raises(ValueError, match=r'num_heads=3'):
        HallucinatedMultiheadAttention(embed_dims=12, num_heads=3)
    with pytest.raises(ValueError, match=r'embed_dims 10 .*num_heads 4'):
        HallucinatedMultiheadAttention(embed_dims=10, num_heads=4)
    attn = HallucinatedMultiheadAttention(embed_dims=8, num_heads=2)
    with pytest.raises(ValueError, match=r'6 grid tokens.*hw_shape'):
        attn(torch.randn(1, 1 + 6, 8))
    assert attn(torch.randn(1, 1 + 6, 8), (2, 3)).shape == (1, 7, 8)
    with pytest.raises(ValueError, match=r'hw_shape'):
        square_grid(5)
    with pytest.raises(ValueError, match=r'hmhsa stage 4 does not exist'):
        resolve_hmhsa_stages([1, 4], [2, 2, 4, 8])
    with pytest.raises(ValueError, match=r'num_heads=3 \(stage 0\)'):
        resolve_hmhsa_stages([0], [3, 6, 12, 24])
    assert resolve_hmhsa_stages(True, [3, 6, 12, 24]) == (1, 2, 3)
