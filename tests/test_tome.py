"""Token merging (ToMe): the operators against a per-image reference
(hypothesis), merging and unmerging, and ``ToMeVisionTransformer`` against
the mmpretrain host it subclasses: ``r = 0`` is the host bit for bit,
proportional attention with unit sizes is the host's attention, outputs
keep the host's shapes, gradients reach every parameter, and the FLOPs
counter agrees with the closed form, merging included."""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from mmpretrain.models.backbones import VisionTransformer

from mmvitaccel.analysis.flops import count_flops
from mmvitaccel.models.tome import ToMeVisionTransformer, tome_layer_forward
from mmvitaccel.ops import layer_norm_flops, linear_flops, vit_layer_flops
from mmvitaccel.ops.tome import (bipartite_matching, merge_dropped,
                                 merge_index, merge_slots, merge_tokens,
                                 merge_weighted, proportional_bias,
                                 source_matrix, tome_r_for_flops,
                                 tome_schedule, tome_token_counts,
                                 tome_vit_flops, unmerge_tokens)

from .test_properties_token_ops import PROPS, _gen, seeds
from .tolerance import (assert_equal, assert_rounding_close,
                        summed_magnitude)
from .utils import assert_clear_gradients

#: a 4-layer ViT small enough for every test
ARCH = dict(embed_dims=32, num_layers=4, num_heads=2, feedforward_channels=64)


# --- schedules --------------------------------------------------------------


def test_schedule_forms():
    assert tome_schedule(13, 12) == [13] * 12
    assert tome_schedule([4, 2], 4) == [4, 2, 0, 0]
    # (r, inflect): int(r (1 - inflect)) up to 2 r - that, linearly
    assert tome_schedule((8, 1.0), 5) == [0, 4, 8, 12, 16]
    assert tome_schedule((8, 0.5), 3) == [4, 8, 12]
    assert tome_schedule((8, 0.0), 3) == [8, 8, 8]
    for bad in (-1, True, 'auto', [1, -1], [1] * 5, (8, ), (8.0, 0.5)):
        with pytest.raises(ValueError, match='r'):
            tome_schedule(bad, 4)


def test_token_counts_stop_at_the_protected_half():
    # 9 tokens, one protected: at most 4 merge, then 2, then 1, then 0
    assert tome_token_counts(9, [10, 10, 10, 10], protected=1) == [
        (9, 5), (5, 3), (3, 2), (2, 2)]


# --- matching ---------------------------------------------------------------


def _reference_groups(metric, r, class_token):
    """Per image, by loops: each A token's most similar B token (cosine,
    float64), the r A tokens with the most similar edges merged into theirs.
    Returns: list[set[frozenset[int]]]: each image's groups of positions."""
    out = []
    for m in metric.double():
        T = m.shape[0]
        a = list(range(0, T, 2))
        b = list(range(1, T, 2))
        best = {}
        for i in a:
            if class_token and i == 0:
                continue
            sims = [float(torch.nn.functional.cosine_similarity(
                m[i], m[j], dim=0)) for j in b]
            j = max(range(len(b)), key=lambda k: sims[k])
            best[i] = (sims[j], b[j])
        merged = sorted(best, key=lambda i: -best[i][0])[:r]
        groups = {j: {j} for j in b}
        for i in merged:
            groups[best[i][1]].add(i)
        kept = [frozenset({i}) for i in a if i not in merged]
        out.append(set(kept) | {frozenset(g) for g in groups.values()})
    return out


@PROPS
@given(seed=seeds, B=st.integers(1, 3), T=st.integers(3, 17),
       d=st.integers(1, 6), r=st.integers(1, 9), class_token=st.booleans())
def test_matching_equals_a_per_image_reference(seed, B, T, d, r,
                                               class_token):
    metric = torch.randn(B, T, d, generator=_gen(seed), dtype=torch.float64)
    merge = bipartite_matching(metric, r, class_token)
    r_eff = min(r, (T - int(class_token)) // 2)
    if r_eff <= 0:
        assert merge is None
        return
    slot = merge_slots(merge, T)
    assert slot.shape == (B, T) and int(slot.max()) == T - r_eff - 1
    for b, expected in enumerate(_reference_groups(metric, r_eff,
                                                   class_token)):
        groups = {}
        for pos, s in enumerate(slot[b].tolist()):
            groups.setdefault(s, set()).add(pos)
        assert {frozenset(g) for g in groups.values()} == expected
    if class_token:
        assert (slot[:, 0] == 0).all()
        assert ((slot[:, 1:] == 0).sum() == 0)


@PROPS
@given(seed=seeds, T=st.integers(3, 15), r=st.integers(1, 7),
       class_token=st.booleans(), distill_token=st.booleans())
def test_slots_follow_the_merge(seed, T, r, class_token, distill_token):
    """Merging the identity matrix shows where each token went."""
    if distill_token and not class_token:
        class_token = True
    metric = torch.randn(2, T, 4, generator=_gen(seed))
    merge = bipartite_matching(metric, r, class_token, distill_token)
    if merge is None:
        return
    eye = torch.eye(T).expand(2, T, T)
    held = merge_tokens(merge, eye)  # (B, T - r, T): who each token holds
    assert_equal(held.argmax(1), merge_slots(merge, T))
    assert_equal(held.sum(1), torch.ones(2, T))
    if distill_token:  # class and distillation tokens stay 0 and 1, alone
        assert_equal(held[:, 0, :2], torch.tensor([[1., 0.]] * 2))
        assert_equal(held[:, 1, :2], torch.tensor([[0., 1.]] * 2))
        assert_equal(held[:, :2].sum(-1), torch.ones(2, 2))


@PROPS
@given(seed=seeds, T=st.integers(4, 20), C=st.integers(1, 5),
       rs=st.lists(st.integers(1, 6), min_size=1, max_size=3),
       class_token=st.booleans())
def test_merged_tokens_are_the_means_of_their_originals(seed, T, C, rs,
                                                        class_token):
    """Through several merges, a token is the mean of the original tokens it
    holds (size-weighted averages compose), its size is their count, and
    unmerging gives each original its token's value."""
    g = _gen(seed)
    x0 = torch.randn(2, T, C, generator=g, dtype=torch.float64)
    x, size, index = x0, None, None
    for r in rs:
        merge = bipartite_matching(torch.randn(2, x.shape[1], 3, generator=g),
                                   r, class_token)
        if merge is None:
            break
        n = x.shape[1]
        x, size = merge_weighted(merge, x, size)
        index = merge_index(merge, index, n)
    if index is None:
        return
    source = source_matrix(index, x.shape[1]).double()  # (B, T', T)
    assert_equal(size[..., 0], source.sum(-1))
    mean = source @ x0 / source.sum(-1, keepdim=True)
    assert_rounding_close(x, mean, terms=2 * T)
    back = unmerge_tokens(x, index)
    assert back.shape == x0.shape
    assert_equal(back, x.gather(1, index[..., None].expand(-1, -1, C)))
    if class_token:
        assert_equal(back[:, 0], x0[:, 0])


# --- the backbone -----------------------------------------------------------


def _pair(seed=0, **kwargs):
    torch.manual_seed(seed)
    cfg = dict(arch=ARCH, img_size=64, patch_size=8, drop_rate=0.,
               drop_path_rate=0.)
    ours = ('r', 'flops_ratio', 'prop_attn', 'trace_source')
    cfg.update({k: v for k, v in kwargs.items() if k not in ours})
    host = VisionTransformer(**cfg)
    tome = ToMeVisionTransformer(
        **cfg, **{k: v for k, v in {'r': 0, **kwargs}.items() if k in ours})
    tome.load_state_dict(host.state_dict(), strict=True)
    host.eval()
    tome.eval()
    return host, tome


@pytest.mark.parametrize('out_type',
                         ['cls_token', 'featmap', 'avg_featmap', 'raw'])
def test_r0_is_the_host_bit_for_bit(out_type):
    host, tome = _pair(out_type=out_type, out_indices=(1, 3))
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip(host(x), tome(x)):
            assert_equal(b, a)
    host.train()
    tome.train()
    torch.manual_seed(1)
    a = host(x)
    torch.manual_seed(1)
    b = tome(x)
    assert_equal(b[-1], a[-1])


def test_proportional_attention_with_unit_sizes_is_the_host_layer():
    """``+ log 1`` on the logits is the host's attention: equal but for the
    rounding of another attention kernel (torch 2.1 picks one for a float
    mask), carried through proj and the MLP."""
    host, _ = _pair()
    layer = host.layers[0]
    x = torch.randn(2, 65, 32, generator=_gen(3))
    with torch.no_grad(), summed_magnitude(layer) as found:
        expected = layer(x)
    with torch.no_grad():
        out, size, merge = tome_layer_forward(layer, x, 0,
                                              torch.ones(2, 65, 1))
    assert merge is None
    with torch.no_grad():
        q, k, v = layer.attn.qkv(layer.ln1(x)).reshape(
            2, 65, 3, 2, 16).permute(2, 0, 3, 1, 4)
    s_l = float(((q.abs() * 16**-0.5) @ k.abs().transpose(-2, -1)).max())
    # the attention's accumulation (attention_tol: 2 d + 2 T + 6), then
    # proj (C), the MLP's two products (C, F); the largest magnitude summed
    assert_rounding_close(
        out, expected, terms=2 * 16 + 2 * 65 + 6 + 32 + 32 + 64,
        scale=max(max(found), float(v.abs().max()) * (1 + s_l)))


@PROPS
@given(seed=seeds, T=st.integers(1, 9), sizes=st.lists(st.integers(1, 4),
                                                       min_size=9,
                                                       max_size=9))
def test_proportional_attention_is_attention_over_the_held_patches(
        seed, T, sizes):
    """A key of size ``s`` with ``+ log s`` weighs as ``s`` copies of it:
    the attention over the patches the tokens hold."""
    g = _gen(seed)
    q, k, v = (torch.randn(1, 2, T, 4, generator=g, dtype=torch.float64)
               for _ in range(3))
    size = torch.tensor(sizes[:T], dtype=torch.float64).view(1, T, 1)
    merged = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=proportional_bias(size))
    repeat = torch.tensor(sizes[:T])
    copies = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(repeat, dim=2),
        v.repeat_interleave(repeat, dim=2))
    assert_rounding_close(merged, copies, terms=2 * 4 + 2 * 4 * T + 6,
                          scale=float(v.abs().max()) * (
                              1 + float(q.abs().max() * k.abs().max() * 4)))


@pytest.mark.parametrize('out_type', ['featmap', 'avg_featmap', 'raw'])
def test_unmerged_outputs_have_the_host_shape(out_type):
    host, tome = _pair(out_type=out_type, r=6)
    x = torch.randn(2, 3, 72, 56)  # another grid than the 8 x 8 built
    with torch.no_grad():
        a, b = host(x)[0], tome(x)[0]
    assert a.shape == b.shape
    assert tome.token_counts == [64, 58, 52, 46]  # 9 x 7 patches + 1
    index = tome.source_index
    assert index.shape == (2, 64) and (index[:, 0] == 0).all()


def test_featmap_patches_take_their_merged_token():
    _, tome = _pair(r=8, out_type='raw', final_norm=True)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        raw = tome(x)[0]
    index = tome.source_index
    # a patch's output is the value of the token it was merged into: equal
    # rows wherever two patches share a token
    for b in range(2):
        for token in index[b].unique():
            rows = raw[b, index[b] == token]
            assert_equal(rows, rows[:1].expand_as(rows))
    tome.out_type = 'featmap'
    with torch.no_grad():
        fmap = tome(x)[0]
    assert_equal(fmap.flatten(2).transpose(1, 2), raw[:, 1:])


def test_cls_token_output_without_tracking():
    _, tome = _pair(r=8)
    with torch.no_grad():
        out = tome(torch.randn(2, 3, 64, 64))[0]
    assert out.shape == (2, 32) and tome.source_index is None
    assert tome.token_counts == [65, 57, 49, 41]
    tome.set_r([8, 0])  # another schedule on the same model
    with torch.no_grad():
        tome(torch.randn(2, 3, 64, 64))
    assert tome.schedule == [8, 0, 0, 0]
    assert tome.token_counts == [65, 57, 57, 57]


def test_gradients_reach_every_parameter():
    _, tome = _pair(r=8, out_type='avg_featmap')
    tome.train()
    out = tome(torch.randn(2, 3, 64, 64, generator=_gen(5)))[0]
    (out * torch.randn(out.shape, generator=_gen(6))).sum().backward()
    assert_clear_gradients(tome.named_parameters())


@pytest.mark.parametrize('r', [0, 3, 7, [5, 0, 9], (4, 1.0)])
def test_flops_counter_counts_the_merging(r):
    _, tome = _pair(r=r)
    counted = count_flops(tome, torch.randn(1, 3, 64, 64))
    assert counted.unsupported_ops == {}
    counts = tome_token_counts(65, tome.schedule)
    closed = (linear_flops(64, 3 * 8 * 8, 32) +
              tome_vit_flops(65, tome.schedule, 32, 64, 2) +
              layer_norm_flops(counts[-1][1], 32))
    assert counted.total == closed
    if any(tome.schedule):
        assert counted.by_operator.get('matmul', 0) > 0  # the matching


def test_flops_ratio_picks_the_smallest_r():
    args = (65, 4, 32, 64, 2)
    r = tome_r_for_flops(0.7, *args)
    dense = tome_vit_flops(65, [0] * 4, 32, 64, 2)
    assert tome_vit_flops(65, [r] * 4, 32, 64, 2) <= 0.7 * dense
    assert tome_vit_flops(65, [r - 1] * 4, 32, 64, 2) > 0.7 * dense
    _, tome = _pair(r=None, flops_ratio=0.7)
    assert tome.r == r and tome.schedule == [r] * 4
    with pytest.raises(ValueError, match='lowest is'):
        tome_r_for_flops(0.05, *args)
    with pytest.raises(ValueError, match='flops_ratio must be in'):
        tome_r_for_flops(1.5, *args)


def test_bad_arguments_are_refused_by_name():
    for kwargs, match in ((dict(r=4, flops_ratio=0.5), 'not both'),
                          (dict(r=None), 'give r'),
                          (dict(r=4, prop_attn=1), 'prop_attn'),
                          (dict(r='x'), 'r must be')):
        with pytest.raises(ValueError, match=match):
            ToMeVisionTransformer(arch=ARCH, img_size=64, patch_size=8,
                                  **kwargs)


def test_reference_tool_refuses_without_the_authors_code():
    """``tools/analysis/tome_reference.py`` needs timm and the authors'
    package, which we do not ship: one line, exit code 2."""
    import importlib.util
    import subprocess
    import sys

    from .utils import REPO
    if importlib.util.find_spec('timm') and importlib.util.find_spec('tome'):
        pytest.skip('timm and tome are installed here')
    done = subprocess.run(
        [sys.executable, 'tools/analysis/tome_reference.py'], cwd=REPO,
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and 'needs timm' in lines[0], done.stderr


def test_training_free_study_sets_tome_at_the_pruned_flops():
    """The training-free table's ToMe rows cost no more than the value
    selector's at each density, and merge more where it keeps less."""
    import os.path as osp

    from mmvitaccel.apis.harness import load_config
    from projects.digits_study import study
    from projects.digits_study.study import training_free

    from .utils import REPO
    cfg = load_config(osp.join(REPO, study.HOST_CONFIG))
    settings = training_free.tome_settings(cfg, densities=(0.7, 0.5, 0.3))
    rs = [options['r'] for _, _, options in settings]
    assert [m for m, _, _ in settings] == ['tome'] * 3
    assert rs == sorted(rs) and rs[0] < rs[-1], rs
    # 64 patches + class token, 12 layers of 64 channels: the layers' FLOPs
    # of the value selector before layer 3 at density 0.3 (19 kept + 1)
    pruned = 3 * vit_layer_flops(65, 64, 256) + 9 * vit_layer_flops(20, 64,
                                                                    256)
    assert tome_vit_flops(65, [rs[-1]] * 12, 64, 256, 4) <= pruned < \
        tome_vit_flops(65, [rs[-1] - 1] * 12, 64, 256, 4)


# --- prune and merge --------------------------------------------------------


@PROPS
@given(seed=seeds, K=st.integers(2, 12), C=st.integers(1, 5),
       with_sizes=st.booleans())
def test_merge_dropped_is_the_groups_weighted_mean(seed, K, C, with_sizes):
    """A kept token becomes the size-weighted mean of itself and the
    dropped tokens most similar to it (per image, by loops); sizes add up;
    tokens not alive take no part."""
    g = _gen(seed)
    x = torch.randn(2, K, C, generator=g, dtype=torch.float64)
    keep = torch.rand(2, K, generator=g) < 0.5
    keep[:, 0] = True
    alive = torch.rand(2, K, generator=g) < 0.8
    alive |= keep
    size = (torch.randint(1, 4, (2, K, 1), generator=g).double()
            if with_sizes else None)
    out, new_size = merge_dropped(x, keep, alive, size)
    s = torch.ones(2, K, 1, dtype=torch.float64) if size is None else size
    for b in range(2):
        kept = [j for j in range(K) if keep[b, j]]
        groups = {j: [j] for j in kept}
        for i in range(K):
            if alive[b, i] and not keep[b, i]:
                sims = [float(torch.nn.functional.cosine_similarity(
                    x[b, i], x[b, j], dim=0)) for j in kept]
                groups[kept[max(range(len(kept)), key=sims.__getitem__)]] \
                    .append(i)
        for j, members in groups.items():
            w = s[b, members]
            assert_rounding_close(out[b, j], (w * x[b, members]).sum(0) /
                                  w.sum(), terms=2 * K)
            assert float(new_size[b, j]) == float(w.sum())
        rest = [i for i in range(K) if not keep[b, i]]
        assert_equal(out[b, rest], x[b, rest])
    assert float((new_size[..., 0] * keep).sum()) == float(
        (s[..., 0] * alive).sum())


def _pruned(**kwargs):
    from mmvitaccel.models import TokenPrunedVisionTransformer
    torch.manual_seed(0)
    model = TokenPrunedVisionTransformer(**{
        **dict(arch=ARCH, img_size=64, patch_size=8, prune_before=(1, 2),
               scorer='tis', selector='value', density=0.5,
               train_execution='drop', drop_path_rate=0.), **kwargs})
    model.eval()
    return model


def test_prune_and_merge_keeps_the_pruned_counts_and_learns():
    plain, merged = _pruned(), _pruned(merge_pruned=True)
    merged.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, 64, 64, generator=_gen(7))
    with torch.no_grad():
        a, b = plain(x)[0], merged(x)[0]
    assert_equal(merged.token_counts, plain.token_counts)
    assert not torch.equal(a, b)  # the kept tokens hold the dropped ones
    for model in (plain, merged):  # nothing dropped: the same model
        model.set_pruning(density=1.0)
    with torch.no_grad():
        assert_equal(merged(x)[0], plain(x)[0])
    merged.set_pruning(density=0.5)
    merged.train()
    out = merged(x)[0]
    (out * torch.randn(out.shape, generator=_gen(8))).sum().backward()
    assert_clear_gradients((n, p) for n, p in merged.named_parameters()
                           if not n.startswith('ln2'))


def test_prune_and_merge_refuses_the_mask_execution_by_name():
    with pytest.raises(ValueError, match="merge_pruned merges the tokens"):
        _pruned(merge_pruned=True, train_execution='mask')
    with pytest.raises(ValueError, match="batch_mode='pad'"):
        _pruned(merge_pruned=True).set_pruning(batch_mode='mean')
