"""STViT-R-Swin in the authors' released layout: their checkpoint names load
(every tensor where it belongs), a wrong layout is refused, and the pieces
their function needs (stem, layer scale, region geometry, unshifted
one-window maps, their STGM form) behave as their code does."""
from collections import OrderedDict

import pytest
import torch
import torch.nn.functional as F
from mmdet.models.backbones.swin import ShiftWindowMSA, swin_converter

from mmvitaccel.models.stvit.stvit_r_swin import STViTRSwinTransformer
from mmvitaccel.models.stvit.stvit_authors import (ConvStem,
                                                   LayerScaleCrossAttentionSwinBlock,
                                                   UnshiftedSmallMapMSA,
                                                   inside_regions)
from mmvitaccel.models.stvit.stvit_checkpoint import (
                                                      stvit_r_authors_converter,
                                                      stvit_r_state_dict)

from .tolerance import assert_rounding_close

DIMS, DEPTHS, HEADS, W = 16, (2, 2, 6, 2), (1, 2, 2, 4), 7

AUTHORS = dict(stem='conv', layer_scale=1e-5, stgm_form='authors',
               shift_small_maps=False, key_windows=(10, 14),
               recovery_window=27)


def tiny(**kwargs):
    cfg = dict(embed_dims=DIMS, depths=DEPTHS, num_heads=HEADS,
               window_size=W, out_indices=(3, ))
    cfg.update(kwargs)
    return STViTRSwinTransformer(**cfg)


def _swin_block(sd, p, C, heads, shifted_map=None):
    """Official Swin block names (``SwinTransformerBlock``)."""
    sd[p + 'norm1.weight'], sd[p + 'norm1.bias'] = torch.randn(C), \
        torch.randn(C)
    sd[p + 'attn.relative_position_bias_table'] = torch.randn(
        (2 * W - 1)**2, heads)
    sd[p + 'attn.relative_position_index'] = torch.randint(
        0, (2 * W - 1)**2, (W * W, W * W))
    sd[p + 'attn.qkv.weight'] = torch.randn(3 * C, C)
    sd[p + 'attn.qkv.bias'] = torch.randn(3 * C)
    sd[p + 'attn.proj.weight'] = torch.randn(C, C)
    sd[p + 'attn.proj.bias'] = torch.randn(C)
    if shifted_map:  # their shift mask buffer, (nW, w*w, w*w)
        sd[p + 'attn_mask'] = torch.zeros(shifted_map, W * W, W * W)
    _norm2_mlp(sd, p, C)


def _norm2_mlp(sd, p, C):
    sd[p + 'norm2.weight'], sd[p + 'norm2.bias'] = torch.randn(C), \
        torch.randn(C)
    sd[p + 'mlp.fc1.weight'] = torch.randn(4 * C, C)
    sd[p + 'mlp.fc1.bias'] = torch.randn(4 * C)
    sd[p + 'mlp.fc2.weight'] = torch.randn(C, 4 * C)
    sd[p + 'mlp.fc2.bias'] = torch.randn(C)


def _cross_block(sd, p, C):
    """Their ``Block`` / ``SemanticAttentionBlock`` names."""
    sd[p + 'layer_scale_1'] = torch.randn(C)
    sd[p + 'layer_scale_2'] = torch.randn(C)
    sd[p + 'norm1.weight'], sd[p + 'norm1.bias'] = torch.randn(C), \
        torch.randn(C)
    sd[p + 'attn.q.weight'], sd[p + 'attn.q.bias'] = torch.randn(C, C), \
        torch.randn(C)
    sd[p + 'attn.kv.weight'] = torch.randn(2 * C, C)
    sd[p + 'attn.kv.bias'] = torch.randn(2 * C)
    sd[p + 'attn.proj.weight'] = torch.randn(C, C)
    sd[p + 'attn.proj.bias'] = torch.randn(C)
    _norm2_mlp(sd, p, C)


def authors_state_dict(semantic_tokens=None):
    """A state dict in the exact key layout of the authors' released
    classification model (``models/swin_transformer.py`` of their STViT-R
    repository), tiny sizes, 224 px geometry (maps 56, 28, 14, 7)."""
    sd = OrderedDict()
    C = DIMS
    for i, (cin, cout) in enumerate(((3, C // 2), (C // 2, C))):
        p = f'patch_embed.proj.{2 * i}.'
        sd[p + 'c.weight'] = torch.randn(cout, cin, 3, 3)
        sd[p + 'bn.weight'], sd[p + 'bn.bias'] = torch.randn(cout), \
            torch.randn(cout)
        sd[p + 'bn.running_mean'] = torch.randn(cout)
        sd[p + 'bn.running_var'] = torch.rand(cout) + .5
        sd[p + 'bn.num_batches_tracked'] = torch.tensor(7)
    side = 56
    for i, depth in enumerate(DEPTHS):
        Ci = C * 2**i
        for j in range(depth):
            p = f'layers.{i}.blocks.{j}.'
            if i == 2 and j % 6:
                _cross_block(sd, p, Ci)
            else:  # stage 2: unshifted window blocks 0, 6, 12
                shifted = i != 2 and j % 2 == 1 and side > W
                _swin_block(sd, p, Ci, HEADS[i],
                            (side // W)**2 if shifted else None)
        if i == 2 and semantic_tokens:
            sd['layers.2.semantic_token2'] = torch.randn(
                1, semantic_tokens, Ci)
        if i < 3:
            sd[f'layers.{i}.downsample.reduction.weight'] = torch.randn(
                2 * Ci, 4 * Ci)
            sd[f'layers.{i}.downsample.norm.weight'] = torch.randn(4 * Ci)
            sd[f'layers.{i}.downsample.norm.bias'] = torch.randn(4 * Ci)
        side //= 2
    sd['norm.weight'], sd['norm.bias'] = torch.randn(8 * C), \
        torch.randn(8 * C)
    sd['head.weight'], sd['head.bias'] = torch.randn(10, 8 * C), \
        torch.randn(10)
    return sd


def test_authors_checkpoint_loads_every_tensor_where_it_belongs():
    theirs = authors_state_dict()
    model = tiny(**AUTHORS)
    report = model.load_pretrained(dict(model=theirs))
    for kind in ('new', 'missing', 'unused', 'mismatched'):
        assert report[kind] == [], kind
    own = model.state_dict()
    assert len(report['loaded']) == len(own)
    # stem
    assert torch.equal(own['patch_embed.layers.1.conv.weight'],
                       theirs['patch_embed.proj.2.c.weight'])
    assert torch.equal(own['patch_embed.layers.0.bn.running_var'],
                       theirs['patch_embed.proj.0.bn.running_var'])
    # their q and kv stacked into our qkv (queries first)
    p = 'layers.2.blocks.2.attn.'
    assert torch.equal(
        own['stages.2.blocks.2.attn.w_msa.qkv.weight'],
        torch.cat([theirs[p + 'q.weight'], theirs[p + 'kv.weight']]))
    assert torch.equal(own['stages.2.blocks.2.attn.w_msa.qkv.bias'],
                       torch.cat([theirs[p + 'q.bias'], theirs[p + 'kv.bias']]))
    # layer scale
    assert torch.equal(own['stages.2.blocks.5.attn.gamma1.weight'],
                       theirs['layers.2.blocks.5.layer_scale_1'])
    assert torch.equal(own['stages.2.blocks.4.ffn.gamma2.weight'],
                       theirs['layers.2.blocks.4.layer_scale_2'])
    # Swin blocks, patch merging (mmdet's reorder), final norm
    ref = swin_converter(OrderedDict(
        (k, v) for k, v in theirs.items() if k.startswith('layers.0.')))
    for key in ('stages.0.blocks.1.attn.w_msa.qkv.weight',
                'stages.0.blocks.1.ffn.layers.0.0.weight',
                'stages.0.downsample.reduction.weight',
                'stages.0.downsample.norm.weight'):
        assert torch.equal(own[key], ref['backbone.' + key]), key
    assert torch.equal(own['stages.2.blocks.0.attn.w_msa.qkv.weight'],
                       theirs['layers.2.blocks.0.attn.qkv.weight'])
    assert torch.equal(own['norm3.weight'], theirs['norm.weight'])


def test_authors_global_centres_named_and_reported():
    """Their G (``semantic_token2``) lands on the first unit's G; it is
    per position of the 224 px semantic grid (36 tokens), ours per window
    position (9), so the loader reports the shapes rather than guess."""
    converted = stvit_r_authors_converter(authors_state_dict(36))
    assert converted['stages.2.global_centres.0'].shape == (1, 36, 4 * DIMS)
    model = tiny(global_centres=True, centre_units='first', **AUTHORS)
    assert len(model.stages[2].global_centres) == 1
    report = model.load_pretrained(dict(model=authors_state_dict(36)))
    assert report['mismatched'] == [
        'stages.2.global_centres.0: checkpoint (1, 36, 64), model '
        '(1, 9, 64)']


def test_wrong_layout_is_refused():
    # their checkpoint into a model without stem / layer scale
    with pytest.raises(ValueError, match=r"layer_scale=1e-5, stem='conv'"):
        tiny(key_windows=(10, 14)).load_pretrained(
            dict(model=authors_state_dict()))
    # a q projection without its kv is not their layout
    broken = authors_state_dict()
    del broken['layers.2.blocks.1.attn.kv.weight']
    with pytest.raises(ValueError, match='not the authors'):
        stvit_r_state_dict(broken)


def test_plain_swin_checkpoint_reports_authors_parts_as_new():
    swin = tiny(key_windows=(10, 14)).state_dict()
    swin = {k: v for k, v in swin.items()}
    model = tiny(**AUTHORS)
    report = model.load_pretrained(swin)
    assert report['missing'] == []
    assert any(k.startswith('patch_embed.layers.') for k in report['new'])
    assert any(k.endswith('gamma1.weight') for k in report['new'])
    assert report['unused'] == [
        k for k in swin if k.startswith('patch_embed.')]


def test_options_refuse_bad_values():
    with pytest.raises(ValueError, match='stem'):
        tiny(stem='conv2')
    with pytest.raises(ValueError, match='stgm_form'):
        tiny(stgm_form='released')
    with pytest.raises(ValueError, match='centre_units'):
        tiny(centre_units='last')
    with pytest.raises(ValueError, match="kv_per_region=True.*stgm_form"):
        tiny(kv_per_region=True)
    with pytest.raises(ValueError, match='layer_scale'):
        tiny(layer_scale=0)
    with pytest.raises(ValueError, match='patch_size'):
        tiny(stem='conv', patch_size=2, strides=(2, 2, 2, 2))


def test_conv_stem_matches_their_shapes():
    stem = ConvStem(3, 96)
    assert sum(p.numel() for p in stem.parameters()) == 43056  # their log
    x, hw = stem(torch.randn(1, 3, 224, 224))
    assert hw == (56, 56) and x.shape == (1, 56 * 56, 96)
    with pytest.raises(ValueError, match='even'):
        ConvStem(3, 15)


def test_inside_regions_are_their_unfold_at_224():
    """At a 14 x 14 map, 7 x 7 windows and k = 10, each window's keys are
    the 10 x 10 unfold with stride 4 and no padding of their code."""
    x = torch.randn(2, 14, 14, 3)
    keys, valid = inside_regions(x, torch.ones(14, 14, dtype=torch.bool), 7,
                                 10)
    ref = F.unfold(x.permute(0, 3, 1, 2), kernel_size=10, stride=4)
    ref = ref.view(2, 3, 100, 4).permute(0, 3, 2, 1).reshape(8, 100, 3)
    assert torch.equal(keys, ref) and bool(valid.all())
    # k = 14 is the whole map for every window
    keys, _ = inside_regions(x, torch.ones(14, 14, dtype=torch.bool), 7, 14)
    assert torch.equal(keys[3], x[0].reshape(196, 3))


def test_one_window_map_is_not_shifted():
    torch.manual_seed(0)
    shifted = ShiftWindowMSA(8, 2, 7, shift_size=3).eval()
    plain = ShiftWindowMSA(8, 2, 7, shift_size=0).eval()
    plain.load_state_dict(shifted.state_dict())
    small, large = torch.randn(1, 49, 8), torch.randn(1, 196, 8)
    with torch.no_grad():
        upstream = shifted(small, (7, 7)), shifted(large, (14, 14))
        shifted.__class__ = UnshiftedSmallMapMSA
        # upstream's shift of a one-window map changes the output (~80% of
        # its largest value here; rounding would be ~1e-7 of it); ours is
        # the unshifted block, the same kernels: bit-exact
        assert (upstream[0] - plain(small, (7, 7))).abs().max() > \
            1e-2 * upstream[0].abs().max()
        assert torch.equal(shifted(small, (7, 7)), plain(small, (7, 7)))
        assert torch.equal(shifted(large, (14, 14)), upstream[1])
    model = tiny(shift_small_maps=False, key_windows=(10, 14))
    assert all(type(b.attn) is UnshiftedSmallMapMSA
               for b in model.stages[3].blocks)


def test_layer_scale_block_scales_both_branches():
    torch.manual_seed(0)
    block = LayerScaleCrossAttentionSwinBlock(8, 2, 32, 0.5).eval().double()
    q = torch.randn(3, 4, 8, dtype=torch.double)
    keys = torch.randn(3, 6, 8, dtype=torch.double)
    with torch.no_grad():
        kv = block.key_values(keys)
        x = q + 0.5 * block.attn.w_msa.proj(
            _plain_attention(block, block.norm1(q), kv))
        ref = x + 0.5 * block.ffn.layers(block.norm2(x))
        # float64, the chain: q (C = 8), logits (d = 4), 6 keys twice,
        # proj (8), fc1 (8), fc2 (32), norms (8 each)
        assert_rounding_close(block(q, kv), ref, 8 + 4 + 12 + 8 + 8 + 32 + 16)


def _plain_attention(block, q, kv):
    C = q.shape[-1]
    qkv = block.attn.w_msa.qkv
    heads = block.attn.w_msa.num_heads
    qh = F.linear(q, qkv.weight[:C], qkv.bias[:C])
    qh = qh.view(3, -1, heads, C // heads).transpose(1, 2)
    k, v = kv.view(3, -1, 2, heads, C // heads).permute(2, 0, 3, 1, 4)
    att = (qh @ k.transpose(-2, -1) * block.attn.w_msa.scale).softmax(-1)
    return (att @ v).transpose(1, 2).reshape(3, -1, C)


#: float64 rounding of the two STGM layers at C = 64 (2 heads, d = 32): per
#: layer q/kv (64), logits (32), softmax and values over <= 36 + 196 keys,
#: proj (64), fc1 (64), fc2 (256), two norms (64 each): n < 2000
STGM_TERMS = 2000


def test_authors_stgm_form_at_224():
    """Their STGM on a 14 x 14 map: STGM-1 has no residual and attends to
    [P; 10x10 unfold]; STGM-2 attends globally to [S1; X] with residual
    S1 + G. Per-region projection gives the same values."""
    torch.manual_seed(0)
    model = tiny(global_centres=True, centre_units='first', **AUTHORS)
    model.init_weights()
    seq = model.stages[2]
    with torch.no_grad():
        for p in seq.parameters():
            p.normal_(0, 0.3)
    seq.eval()
    seq.double()
    x = torch.randn(2, 14, 14, 4 * DIMS, dtype=torch.double)
    valid = torch.ones(14, 14, dtype=torch.bool)
    stgm1, stgm2 = seq.blocks[1], seq.blocks[2]
    with torch.no_grad():
        windows, sem, _ = seq.generate(0, stgm1, stgm2, x, valid)
        P = F.adaptive_max_pool2d(
            windows.view(8, 7, 7, -1).permute(0, 3, 1, 2), 3)
        P = P.flatten(2).transpose(1, 2)  # (B*nW, 9, C)
        region = F.unfold(x.permute(0, 3, 1, 2), kernel_size=10, stride=4)
        region = region.view(2, -1, 100, 4).permute(0, 3, 2, 1).reshape(
            8, 100, -1)
        s1 = stgm1.attend(stgm1.norm1(P),
                          stgm1.key_values(torch.cat([P, region], 1)))
        s1 = s1 + stgm1.ffn.gamma2(stgm1.ffn.layers(stgm1.norm2(s1)))
        q = s1.reshape(2, 36, -1) + seq.global_centres[0].repeat(1, 4, 1)
        keys = torch.cat([s1.reshape(2, 36, -1), x.reshape(2, 196, -1)], 1)
        s2 = q + stgm2.attend(stgm2.norm1(q), stgm2.key_values(keys))
        s2 = s2 + stgm2.ffn.gamma2(stgm2.ffn.layers(stgm2.norm2(s2)))
        assert_rounding_close(sem.reshape(2, 36, -1), s2, STGM_TERMS)
        # the second unit has no G
        _, sem_b, _ = seq.generate(1, stgm1, stgm2, x, valid)
        seq.kv_per_region = True
        _, sem_c, _ = seq.generate(1, stgm1, stgm2, x, valid)
        assert_rounding_close(sem_b, sem_c, STGM_TERMS)


def test_convert_checkpoint_tool_reads_their_checkpoint(tmp_path):
    """``tools/model_converters/convert_checkpoint.py`` on a checkpoint as
    their training script saves it (``{'model': state_dict, ...}``)."""
    from .test_tools import run
    from .utils import REPO
    theirs = authors_state_dict()
    torch.save(dict(model=theirs, epoch=299), tmp_path / 'theirs.pth')
    config = tmp_path / 'tiny_authors.py'
    config.write_text(
        f"_base_ = '{REPO}/configs/stvit_r_swin_s_authors_in1k.py'\n"
        f"model = dict(backbone=dict(arch=None, embed_dims={DIMS}, "
        f"depths={list(DEPTHS)}, num_heads={list(HEADS)}))\n")
    out = run('tools/model_converters/convert_checkpoint.py', str(config),
              str(tmp_path / 'theirs.pth'), str(tmp_path / 'ours.pth'))
    for kind in ('new', 'missing', 'unused', 'mismatched'):
        assert f'{kind:>10}: 0' in out, out
    state = torch.load(tmp_path / 'ours.pth')['state_dict']
    assert torch.equal(state['backbone.stages.2.blocks.3.attn.gamma1.weight'],
                       theirs['layers.2.blocks.3.layer_scale_1'])


def test_global_centres_in_the_first_unit_only_paper_form():
    torch.manual_seed(0)
    first = tiny(global_centres=True, centre_units='first',
                 key_windows=(10, 14), depths=(2, 2, 12, 2))
    first.init_weights()
    plain = tiny(key_windows=(10, 14), depths=(2, 2, 12, 2))
    plain.load_state_dict(first.state_dict(), strict=False)
    assert [k for k in first.state_dict() if 'global_centres' in k] == [
        'stages.2.global_centres.0']
    # float64: G (init std 0.02, in the queries only) moves S2 by ~3e-6 of
    # its scale, which float32 rounding (~1e-6 here) would blur
    first.double()
    plain.double()
    x = torch.randn(1, 14, 14, 4 * DIMS, dtype=torch.double)
    valid = torch.ones(14, 14, dtype=torch.bool)
    a, b = first.stages[2], plain.stages[2]
    with torch.no_grad():
        for u in (0, 1):
            blocks = (6 * u + 1, 6 * u + 2)
            out_a = a.generate(u, *[a.blocks[i] for i in blocks], x, valid)
            out_b = b.generate(u, *[b.blocks[i] for i in blocks], x, valid)
            if u == 0:  # 1e-8: far above float64 rounding (2 n u < 1e-12)
                assert (out_a[1] - out_b[1]).abs().max() > \
                    1e-8 * out_b[1].abs().max()
            else:  # no G, the same computation: bit-exact
                assert torch.equal(out_a[1], out_b[1])
