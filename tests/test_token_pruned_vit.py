"""TokenPrunedVisionTransformer: upstream parity, masked vs dropped,
pad-and-mask batching, threshold gradients, analytical FLOPs, errors."""
from functools import partial
from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from mmpretrain.models import VisionTransformer

import mmvitaccel  # noqa: F401
from mmvitaccel.models import TokenPrunedVisionTransformer
from mmvitaccel.models.token_pruning import token_pruning_layer as tpl
from mmvitaccel.analysis.flops import count_flops
from mmvitaccel.ops import masked_attention

from .tolerance import (assert_equal, assert_rounding_close,
                        summed_magnitude)

TINY = dict(embed_dims=64, num_layers=6, num_heads=4, feedforward_channels=128)
KW = dict(arch=TINY, img_size=64, patch_size=8)  # 8x8 = 64 patches

#: float64 forwards of TINY that take other paths (dropped or padded tokens,
#: another attention kernel) agree within rounding: the longest chain of
#: dependent sums is the patch embedding (3 x 8 x 8 = 192), per layer the
#: LayerNorms' means and variances (2 x 2 x 64), qkv (64), the logits
#: (2 x 16), the softmax's maximum and sum and A V over <= 65 keys
#: (3 x 65), proj (64), fc1 (64) and fc2 (128, twice for GELU's slope):
#: < 1100, six layers and the final norm: n = 7000
TINY_TERMS = 7000


def _upstream(**kwargs):
    torch.manual_seed(0)
    vit = VisionTransformer(**KW, **kwargs)
    vit.init_weights()
    with torch.no_grad():  # peaky attention, so that scores differ
        for p in vit.parameters():
            p.add_(0.3 * torch.randn_like(p))
    vit.eval()  # mmpretrain backbones' train() returns None: no chaining
    return vit


def _ours(vit, **kwargs):
    kwargs = {**KW, 'prune_before': (2, 4), **kwargs}
    model = TokenPrunedVisionTransformer(**kwargs)
    missing, unexpected = model.load_state_dict(vit.state_dict(),
                                                strict=False)
    assert not unexpected and set(missing) <= {'thresholds'}
    model.eval()
    return model


def _images(B=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, 3, 64, 64, generator=g) * torch.linspace(
        0.5, 2., B)[:, None, None, None]


@pytest.mark.parametrize('out_type', ['cls_token', 'avg_featmap', 'raw'])
@pytest.mark.parametrize('setting', [
    dict(selector='value', density=1.0),
    dict(selector='mass', mass_threshold=1.0),
    dict(selector='threshold', prune=False, thresholds=(0.01, 0.02)),
])
def test_dense_setting_equals_upstream_exactly(setting, out_type):
    vit = _upstream(out_type=out_type, out_indices=(3, 5))
    ours = _ours(vit, out_type=out_type, out_indices=(3, 5), **setting)
    x = _images()
    with torch.no_grad():
        for a, b in zip(vit(x), ours(x)):
            assert torch.equal(a, b)
    ours.train()
    vit.train()
    with torch.no_grad():
        for a, b in zip(vit(x), ours(x)):
            assert torch.equal(a, b)


@pytest.mark.parametrize('selector,mask_mode,scorer', [
    ('mass', 'logits', 'tis'),
    ('value', 'logits', 'cls'),
    ('threshold', 'policy', 'asvit'),
])
def test_masked_training_and_dropped_inference_agree_on_kept_tokens(
        selector, mask_mode, scorer):
    vit = _upstream()
    ours = _ours(vit, selector=selector, mask_mode=mask_mode, scorer=scorer,
                 mass_threshold=0.6, density=0.5, out_type='raw',
                 thresholds=(0.01, 0.015)).double()
    x = _images(1).double()
    # the policy softmax's stabiliser eps gives every probability eps / T
    # (masked_attention): here eps = 0, so that masked and dropped are the
    # same function; the eps term's own bound, 2 eps max|v| per attention,
    # is checked in test_properties_token_ops
    exact_policy = partial(masked_attention, eps=0.)
    with torch.no_grad(), mock.patch.object(
            tpl, 'masked_attention', exact_policy), \
            summed_magnitude(ours) as sums:
        ours.train()  # the training forward (no dropout in this model)
        masked = ours(x)[0]
        masks = [m.clone() for m in ours.keep_masks]
        ours.eval()
        dropped = ours(x)[0]
        ours.set_pruning(test_execution='mask')  # masks at test time too
        assert_equal(ours(x)[0], masked)  # the same path: bit-exact
    assert all(torch.equal(a, b) for a, b in zip(masks, ours.keep_masks))
    keep = masks[-1][0]
    assert 0 < int(keep.sum()) < 64, 'the setting must prune something'
    assert dropped.shape[1] == 1 + int(keep.sum())
    # float64: rounding of the two paths (TINY_TERMS)
    assert_rounding_close(dropped[:, 0], masked[:, 0], TINY_TERMS, max(sums))
    assert_rounding_close(dropped[0, 1:], masked[0, 1:][keep], TINY_TERMS,
                          max(sums))


@pytest.mark.parametrize('selector', ['mass', 'threshold'])
def test_pad_and_mask_batch_equals_per_image(selector):
    vit = _upstream()
    ours = _ours(vit, selector=selector, mass_threshold=0.6,
                 thresholds=(0.012, 0.016), batch_mode='pad').double()
    x = _images(4).double()
    with torch.no_grad(), summed_magnitude(ours) as sums:
        batched = ours(x)[0]
        counts = [int(m.sum()) for m in ours.keep_masks[-1]]
        batched_masks = ours.keep_masks
        single = []
        for i in range(len(x)):
            single.append(ours(x[i:i + 1])[0])
            for b, s in zip(batched_masks, ours.keep_masks):
                assert torch.equal(b[i], s[0])
    assert len(set(counts)) > 1, f'counts must differ: {counts}'
    assert 0 < min(counts) and max(counts) < 64
    # float64: rounding of the batched and per-image paths (TINY_TERMS)
    assert_rounding_close(batched, torch.cat(single), TINY_TERMS, max(sums))


def test_batch_mean_count_and_kept_indices():
    vit = _upstream()
    ours = _ours(vit, selector='mass', mass_threshold=0.6)
    x = _images(4)
    with torch.no_grad():
        ours(x)
        exact = [int(m.sum()) for m in ours.keep_masks[0]]
        ours.set_pruning(batch_mode='mean')
        ours(x)
    counts = [int(m.sum()) for m in ours.keep_masks[0]]
    assert counts == [round(sum(exact) / len(exact))] * 4
    first = ours.kept_indices[0]
    assert len(first) == 4 and all(len(i) == counts[0] for i in first)
    assert torch.equal(ours.keep_masks[0][2].nonzero().flatten(), first[2])
    # per layer: all patches before the first location (2), then the masks
    assert ours.layer_keep_mask(1).all() and ours.layer_keep_mask(1).shape \
        == (4, 64)
    assert torch.equal(ours.layer_keep_mask(3), ours.keep_masks[0])
    assert torch.equal(ours.layer_keep_mask(5), ours.keep_masks[1])


def test_density_changes_on_the_fly_and_counts_follow():
    vit = _upstream()
    ours = _ours(vit, selector='value', density=0.5)
    x = _images(2)
    with torch.no_grad():
        ours(x)
        assert ours.token_counts[0].tolist() == [65, 65, 33, 33, 17, 17]
        ours.set_pruning(density=0.25)
        ours(x)
        assert ours.token_counts[0].tolist() == [65, 65, 16, 16, 4, 4]
    with pytest.raises(ValueError, match='density'):
        ours.set_pruning(density=0)


def test_thresholds_get_gradients_through_the_token_count():
    vit = _upstream()
    ours = _ours(vit, selector='threshold', scorer='asvit',
                 mask_mode='policy', thresholds=(0.012, 0.016), tau=1e-3)
    ours.train()
    out = ours(_images(2))[0]
    flops = ours.analytic_flops()
    assert flops.requires_grad and flops.shape == (2, )
    (flops.mean() + out.sum()).backward()
    assert ours.thresholds.grad is not None
    assert (ours.thresholds.grad != 0).all()
    # raising a threshold lowers the count: positive d(-FLOPs)/d(theta)
    assert (ours.thresholds.grad < 0).all()


def test_analytic_flops_match_the_counter():
    vit = _upstream()
    ours = _ours(vit, selector='value', density=0.5)
    x = _images(1)
    ours.set_pruning(density=1.0)
    dense = count_flops(ours, x).total
    ours.set_pruning(density=0.5)
    sparse = count_flops(ours, x).total
    with torch.no_grad():
        ours(x)
    saved = ours.dense_flops(65) - ours.analytic_flops()[0]
    assert dense - sparse == int(saved)


def test_bad_settings_raise():
    with pytest.raises(ValueError, match='prune_before'):
        TokenPrunedVisionTransformer(**KW, prune_before=(4, 2))
    with pytest.raises(ValueError, match='prune_before'):
        TokenPrunedVisionTransformer(**KW, prune_before=(0, ))
    with pytest.raises(ValueError, match='scorer'):
        TokenPrunedVisionTransformer(**KW, scorer='norm')
    with pytest.raises(ValueError, match='one threshold per'):
        TokenPrunedVisionTransformer(**KW, prune_before=(2, 4),
                                     selector='threshold', thresholds=(.1, ))
    with pytest.raises(ValueError, match='mask'):
        TokenPrunedVisionTransformer(**KW, selector='threshold',
                                     train_execution='drop')


def test_deit_small_loads_upstream_weights_and_prunes():
    vit = VisionTransformer(arch='deit-small')
    ours = TokenPrunedVisionTransformer(arch='deit-small', prune_before=(3, ),
                                        selector='mass')
    missing, unexpected = ours.load_state_dict(vit.state_dict(),
                                               strict=False)
    assert not missing and not unexpected
    with torch.no_grad():
        ours.eval()
        out = ours(torch.randn(1, 3, 224, 224))[0]
    assert out.shape == (1, 384)
    assert ours.token_counts[0, :3].tolist() == [197.] * 3


# --- the scoring layer: fused for class-row scorers --------------------------


@settings(max_examples=25, deadline=None, database=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1), B=st.integers(1, 3),
       T=st.integers(2, 20), masked=st.booleans())
def test_class_row_scoring_equals_the_map_without_it(seed, B, T, masked):
    """``attn_rows='cls'``: the layer runs in the fused kernel (the explicit
    map is never built) and its outputs, context and class-token row equal
    the explicit map's, so AS-ViT's and EViT's scores are unchanged
    (float64; key masks with some keys pruned)."""
    from mmpretrain.models.backbones.vision_transformer import \
        TransformerEncoderLayer

    from mmvitaccel.ops import asvit_score, cls_attention_score
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    layer = TransformerEncoderLayer(embed_dims=16, num_heads=2,
                                    feedforward_channels=32).double().eval()
    x = torch.randn(B, T, 16, generator=g, dtype=torch.float64) * 2
    policy = None
    if masked:
        policy = torch.rand(B, T, generator=g) < 0.6
        policy[:, 0] = True  # the class token is never pruned
    with torch.no_grad(), summed_magnitude(layer) as sums:
        ref = tpl.layer_forward(layer, x, policy, need_attn=True)

        def explicit(*args, **kwargs):
            raise AssertionError('the class-row path built the map')

        with mock.patch.object(tpl, 'masked_attention', explicit):
            got = tpl.layer_forward(layer, x, policy, need_attn=True,
                                    attn_rows='cls')
    assert got[1].shape == (B, 2, 1, T)
    # float64, another attention kernel: the longest chain of one layer of
    # width 16 (LayerNorms 2 x 2 x 16, qkv 16, logits 2 x 8, softmax and
    # A V 3 x 20, proj 16, fc1 16, fc2 2 x 32) and the scores' sums (norms
    # of 8, sums over 2 heads) is below n = 400; S: the layer's largest sum
    # of |terms| (hooks), at least 1 (probabilities and scores are <= 1)
    for a, b in ((got[0], ref[0]), (got[1], ref[1][:, :, :1]),
                 (got[2], ref[2]),
                 (asvit_score(got[1], got[2]), asvit_score(ref[1], ref[2])),
                 (cls_attention_score(got[1]), cls_attention_score(ref[1]))):
        assert_rounding_close(a, b, 400, max(sums))


@pytest.mark.parametrize('scorer', ['asvit', 'cls'])
def test_class_row_scorers_prune_as_with_the_map(scorer):
    """A whole AS-ViT / EViT forward (dropped tokens, padded batch) keeps
    the same tokens and gives the same features whether the scoring layers
    build the map or run fused."""
    vit = _upstream()
    ours = _ours(vit, selector='threshold', scorer=scorer,
                 thresholds=(0.012, 0.016), batch_mode='pad',
                 out_type='raw').double()
    x = _images(4).double()
    with torch.no_grad(), summed_magnitude(ours) as sums:
        fused = ours(x)[0]
        fused_masks = ours.keep_masks
        ours.fused_scoring = False
        ref = ours(x)[0]
    assert all(torch.equal(a, b) for a, b in zip(fused_masks,
                                                 ours.keep_masks))
    counts = [int(m.sum()) for m in ours.keep_masks[-1]]
    assert 0 < min(counts) and max(counts) < 64, counts
    # float64: rounding of the fused and explicit paths (TINY_TERMS)
    assert_rounding_close(fused, ref, TINY_TERMS, max(sums))
