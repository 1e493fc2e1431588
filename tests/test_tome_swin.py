"""ToMe inside Swin's windows (``ToMeSwinTransformer``): the grouped matching
never merges across a shift region or padding (hypothesis), the merged
window attention with unit sizes is the host's, merging identical tokens
changes nothing, ``r = 0`` is the host bit for bit through the switch on
mmdet's, mmseg's and mmpretrain's Swins, every output map keeps the
host's shape, gradients reach every parameter, and ``tools/test.py`` runs
the converted Mask R-CNN on the upstream weights with every tensor
loaded."""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from mmdet.models.backbones import SwinTransformer
from mmengine.registry import MODELS, DefaultScope, init_default_scope

from mmvitaccel.analysis.flops import count_flops
from mmvitaccel.models.tome import ToMeSwinTransformer
from mmvitaccel.models.tome.tome_swin import (merged_window_attention,
                                              tome_swin_block_forward)
from mmvitaccel.ops.tome import bipartite_matching, merge_slots
from mmvitaccel.models.tome.tome_swin_stage import tome_swin_stage_forward
from mmvitaccel.ops.tome_window import (block_cells, merged_positions,
                                        map_merge_cap, window_groups,
                                        window_merge_cap)
from mmvitaccel.switch.accelerate import (accelerate_config,
                                          load_upstream_config)
from mmvitaccel.switch.vit_placement import tome_swin_r

from .test_properties_token_ops import PROPS, _gen, seeds
from .tolerance import assert_equal, assert_rounding_close, summed_magnitude
from .utils import (assert_clear_gradients, assert_tools_test_loads_everything,
                    user_checkpoint)

MMDET_SWIN = 'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'
MMSEG_SWIN = ('mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_'
              '8xb2-160k_ade20k-512x512.py')
MMPRETRAIN_SWIN = 'mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py'
#: a Swin small enough for every test
SMALL = dict(embed_dims=16, depths=(2, 2, 2, 2), num_heads=(1, 2, 2, 4),
             out_indices=(0, 1, 2, 3))


# --- the grouped matching -------------------------------------------------


@PROPS
@given(seed=seeds, Bw=st.integers(1, 3), n=st.integers(2, 16),
       groups=st.integers(1, 3), r=st.integers(1, 8))
def test_a_token_merges_only_within_its_group(seed, Bw, n, groups, r):
    """Every merged token holds tokens of one group, and the matching
    merges exactly ``min(r, cap)`` tokens a window."""
    g = _gen(seed)
    metric = torch.randn(Bw, n, 3, generator=g, dtype=torch.float64)
    labels = torch.randint(0, groups, (1, n), generator=g)
    cap = window_merge_cap(labels)
    r = min(r, cap)
    if r == 0:
        return
    merge = bipartite_matching(metric, r, class_token=False,
                               groups=labels.repeat(Bw, 1))
    slot = merge_slots(merge, n)
    assert int(slot.max()) == n - r - 1
    for b in range(Bw):
        held = {}
        for pos, s in enumerate(slot[b].tolist()):
            held.setdefault(s, set()).add(int(labels[0, pos]))
        assert all(len(v) == 1 for v in held.values())


@PROPS
@given(H=st.integers(1, 30), W=st.integers(1, 30), window=st.integers(1, 7),
       shift=st.integers(0, 6))
def test_the_cap_in_integers_is_that_of_the_groups(H, W, window, shift):
    """:func:`map_merge_cap` (no tensor: it holds under export) ==
    :func:`window_merge_cap` of the tensor groups."""
    shift = shift % window
    padded = (-(-H // window) * window, -(-W // window) * window)
    groups = window_groups((H, W), padded, window, shift)
    assert map_merge_cap((H, W), padded, window, shift) == \
        window_merge_cap(groups)


def test_the_cap_under_capture_is_counted_beside_the_cache(monkeypatch):
    """Under graph capture :func:`map_merge_cap` counts without its cache
    (Dynamo would bypass the cache with a warning); eager calls take it;
    the count is the same."""
    import mmvitaccel.ops.tome_window as tome_window
    args = ((50, 83), (56, 84), 7, 3)
    eager = map_merge_cap(*args)
    before = tome_window._cached_map_merge_cap.cache_info()
    assert map_merge_cap(*args) == eager
    assert tome_window._cached_map_merge_cap.cache_info().hits == \
        before.hits + 1
    monkeypatch.setattr(tome_window, 'is_capturing', lambda: True)
    before = tome_window._cached_map_merge_cap.cache_info()
    assert map_merge_cap(*args) == eager
    assert tome_window._cached_map_merge_cap.cache_info() == before


def test_groups_are_shift_regions_and_padding():
    # a 6x6 map padded to 8x8, windows of 4 shifted by 2: the padding
    # (rolled to rows and columns 4-5) and three regions a side
    groups = window_groups((6, 6), (8, 8), 4, 2)
    assert groups.shape == (4, 16)
    plain = window_groups((8, 8), (8, 8), 4, 0)
    assert (plain == 0).all() and window_merge_cap(plain) == 8
    # the last window: regions 4, 5 over 7, 8 (2 * region), its first two
    # rows and columns padded (+ 1)
    last = groups[3].view(4, 4)
    assert last.tolist() == [[9, 9, 11, 11], [9, 9, 11, 11],
                             [15, 15, 16, 16], [15, 15, 16, 16]]
    assert window_merge_cap(groups) == 8  # each group spans two columns
    # an A token (even position) with no B token of its group cannot merge
    assert window_merge_cap(torch.tensor([[0, 1, 0, 1]])) == 0
    assert window_merge_cap(torch.tensor([[0, 0, 1, 1, 1]])) == 2
    assert window_merge_cap(torch.tensor([[0, 0, 1, 1, 1],
                                          [0, 1, 1, 1, 0]])) == 1


def test_merged_positions_follow_the_merge_order():
    metric = torch.randn(2, 9, 4, generator=_gen(1))
    merge = bipartite_matching(metric, 3, class_token=False)
    pos = merged_positions(merge, 9)
    slot = merge_slots(merge, 9)
    # each merged token sits at one of the positions it holds, its B token
    # where it merged
    for b in range(2):
        for s, p in enumerate(pos[b].tolist()):
            assert slot[b, p] == s


# --- one block ---------------------------------------------------------------


def _block(shift, window=4, dims=16, heads=2, zero_bias=False):
    torch.manual_seed(0)
    host = SwinTransformer(embed_dims=dims, depths=(2, ), num_heads=(heads, ),
                           window_size=window, strides=(4, ),
                           out_indices=(0, ))
    block = host.stages[0].blocks[int(bool(shift))]
    block.eval()
    if zero_bias:
        block.attn.w_msa.relative_position_bias_table.data.zero_()
    return block


@pytest.mark.parametrize('shift', [0, 2])
def test_unit_sizes_at_their_positions_are_the_hosts_window_attention(shift):
    """``+ log 1`` with every token at its own position and region: the
    host's ``WindowMSA`` with its shift mask, the same operations."""
    block = _block(shift)
    msa = block.attn.w_msa
    x = torch.randn(8, 16, 16, generator=_gen(2))
    groups = window_groups((8, 8), (8, 8), 4, shift).repeat(2, 1)
    pos = torch.arange(16).expand(8, -1)
    region = groups // 2 if shift else None
    mask = None
    if shift:
        apart = (groups[:4, :, None] // 2) != (groups[:4, None, :] // 2)
        mask = apart.float() * -100.
    with torch.no_grad():
        expected = msa(x, mask)
        got = merged_window_attention(msa, x, torch.ones(8, 16, 1), pos,
                                      region)
    assert_equal(got, expected)


@pytest.mark.parametrize('shift,size', [(0, 8), (2, 8), (0, 6), (2, 6)])
def test_merging_identical_tokens_changes_nothing(shift, size):
    """Columns in equal pairs: each A token merges into its twin, and with
    proportional attention the block computes the host block's output
    (zero position tables: a merged token sits at its B token's place).
    Equal but for the rounding of sums over fewer keys."""
    block = _block(shift, zero_bias=True)
    cols = torch.randn(1, size, size // 2, 16, generator=_gen(3))
    x = cols.repeat_interleave(2, dim=2).reshape(1, size * size, 16)
    assert window_merge_cap(window_groups((size, size), (8, 8), 4,
                                          shift)) == 8
    with torch.no_grad(), summed_magnitude(block) as found:
        expected = block(x, (size, size))
        got = tome_swin_block_forward(block, x, (size, size), 8)
    # attention (2 d + 2 n + 6, attention_tol's count), proj (C), the MLP's
    # two products (C, 4 C)
    assert_rounding_close(got, expected, terms=2 * 8 + 2 * 16 + 6 + 16 +
                          16 + 64, scale=max(found))
    # and the merge happened: random columns differ from the host's
    cols = torch.randn(1, size, size, 16, generator=_gen(4))
    x = cols.reshape(1, size * size, 16)
    with torch.no_grad():
        assert not torch.allclose(
            tome_swin_block_forward(block, x, (size, size), 8),
            block(x, (size, size)))


def test_the_stage_design_merging_identical_tokens_changes_nothing():
    """The stage design on a map whose columns come in equal pairs: each A
    token merges into its twin, which shares its windows and regions in
    every block, so that with proportional attention and zero position
    tables the stage computes the host stage's output (the host's -100
    between shift regions is our exclusion, up to e^-100)."""
    torch.manual_seed(0)
    host = SwinTransformer(embed_dims=16, depths=(2, ), num_heads=(2, ),
                           window_size=4, strides=(4, ), out_indices=(0, ))
    host.eval()
    stage = host.stages[0]
    for block in stage.blocks:
        block.attn.w_msa.relative_position_bias_table.data.zero_()
    cols = torch.randn(2, 8, 4, 16, generator=_gen(9))
    x = cols.repeat_interleave(2, dim=2).reshape(2, 64, 16)
    with torch.no_grad(), summed_magnitude(stage) as found:
        expected = x
        for block in stage.blocks:
            expected = block(expected, (8, 8))
        got = tome_swin_stage_forward(stage, x, (8, 8), 0.5)
    # two blocks of attention (2 d + 2 n + 6) over up to 64 keys, proj and
    # the MLP's two products (C, C, 4 C)
    assert_rounding_close(got, expected, terms=2 * (2 * 8 + 2 * 64 + 6 +
                                                    16 + 16 + 64),
                          scale=max(found))
    x = torch.randn(2, 64, 16, generator=_gen(10))
    with torch.no_grad():
        assert not torch.allclose(tome_swin_stage_forward(
            stage, x, (8, 8), 0.5), stage.blocks[1](
                stage.blocks[0](x, (8, 8)), (8, 8)))


def test_cells_are_the_hosts_windows_and_regions():
    """Two positions share a cell exactly when the host's shifted window
    attention lets one see the other (the same window and shift region)."""
    H = W = 6
    for shift in (0, 2):
        cells, _ = block_cells((H, W), 4, shift)
        groups = window_groups((H, W), (8, 8), 4, shift)
        # the host's frame: padded, rolled, partitioned; each position's
        # window and group (region) there
        index = torch.arange(H * W).view(H, W)
        frame = torch.full((8, 8), -1, dtype=torch.long)
        frame[:H, :W] = index
        frame = torch.roll(frame, (-shift, -shift), (0, 1))
        windows = frame.view(2, 4, 2, 4).permute(0, 2, 1, 3).reshape(4, 16)
        same = torch.zeros(H * W, H * W, dtype=torch.bool)
        for win, grp in zip(windows, groups):
            for i in range(16):
                for j in range(16):
                    if win[i] >= 0 and win[j] >= 0 and grp[i] == grp[j]:
                        same[win[i], win[j]] = True
        assert torch.equal(cells[:, None] == cells[None, :], same)


# --- the backbone ----------------------------------------------------------


def _pair(r, **kwargs):
    torch.manual_seed(0)
    host = SwinTransformer(**SMALL, window_size=4)
    tome = ToMeSwinTransformer(r=r, **SMALL, window_size=4, **kwargs)
    tome.load_state_dict(host.state_dict())
    host.eval()
    tome.eval()
    return host, tome


def test_r0_is_the_host_bit_for_bit():
    host, tome = _pair(0)
    x = torch.randn(2, 3, 90, 70, generator=_gen(5))
    with torch.no_grad():
        for e, g in zip(host(x), tome(x)):
            assert_equal(g, e)


@pytest.mark.parametrize('r', [3, [0, 8, 4, 2]])
def test_every_map_keeps_the_hosts_shape(r):
    host, tome = _pair(r)
    x = torch.randn(1, 3, 90, 70, generator=_gen(6))
    with torch.no_grad():
        expected, got = host(x), tome(x)
    assert [g.shape for g in got] == [e.shape for e in expected]
    assert not torch.allclose(got[1], expected[1])


def test_flops_fall_with_r():
    _, tome = _pair(0)
    x = torch.randn(1, 3, 64, 64)
    counts = []
    for r in (0, 4, 8):
        tome.set_r(r)
        counts.append(count_flops(tome, x).total)
    assert counts[0] > counts[1] > counts[2]


@pytest.mark.parametrize('design,options', [
    ('window', dict(r=6)), ('stage', dict(stage_ratio=(0.3, 0, 0.5, 0)))])
def test_gradients_reach_every_parameter_in_either_design(design, options):
    torch.manual_seed(0)
    tome = ToMeSwinTransformer(**SMALL, window_size=4, design=design,
                               **options)
    tome.train()
    outs = tome(torch.randn(2, 3, 64, 64, generator=_gen(7)))
    sum((o * torch.randn(o.shape, generator=_gen(8))).sum()
        for o in outs).backward()
    assert_clear_gradients(tome.named_parameters())


def test_the_stage_design_keeps_the_hosts_shapes_and_is_it_at_ratio_0():
    host, tome = _pair(0, design='stage', stage_ratio=0.)
    x = torch.randn(1, 3, 90, 70, generator=_gen(11))
    with torch.no_grad():
        expected, got = host(x), tome(x)
        tome.stage_ratio = [0., 0.2, 0.5, 0.]
        merged = tome(x)
    for e, g, m in zip(expected, got, merged):
        assert_equal(g, e)
        assert m.shape == e.shape
    assert not torch.allclose(merged[2], expected[2])


def test_bad_r_is_refused_by_name():
    for bad in (-1, True, [1, 2], 'all', 2.5):
        with pytest.raises(ValueError, match='r must be an int >= 0 or one '
                           'per stage'):
            ToMeSwinTransformer(r=bad, **SMALL)
    with pytest.raises(ValueError, match=r"design must be one of \('window', "
                       r"'stage'\), got 'global'"):
        ToMeSwinTransformer(design='global', **SMALL)
    for bad in (0.6, -0.1, [0.5] * 3, True):
        with pytest.raises(ValueError, match=r'stage_ratio must be a share '
                           r'in \[0, 0.5\]'):
            ToMeSwinTransformer(design='stage', stage_ratio=bad, **SMALL)


# --- the switch ------------------------------------------------------------


def _build(cfg_model, scope):
    init_default_scope(scope)
    with DefaultScope.overwrite_default_scope(scope):
        torch.manual_seed(0)
        return MODELS.build(cfg_model)


def _backbones(config, **options):
    """The upstream backbone and the converted one, 16 channels wide."""
    cfg = load_upstream_config(config)
    new = accelerate_config(cfg, 'tome', **options)
    built = []
    for c in (cfg, new):
        backbone = c.model.backbone.to_dict()
        backbone.pop('init_cfg', None)
        heads = (1, 2, 2, 4)
        if c is cfg and cfg.default_scope == 'mmpretrain':
            backbone['arch'] = dict(embed_dims=16, depths=(2, 2, 6, 2),
                                    num_heads=heads)
        else:
            backbone.update(embed_dims=16, num_heads=heads)
        built.append(_build(backbone, cfg.default_scope))
        built[-1].eval()  # (mmdet's Swin.train returns None)
    return built


@pytest.mark.parametrize('config', [MMDET_SWIN, MMSEG_SWIN, MMPRETRAIN_SWIN])
def test_the_switch_places_tome_on_every_swin(config):
    """The paper-less default (16 of a 7x7 window) on each toolbox's Swin
    keeps the upstream maps' shapes (``r = 0`` is the host bit for bit:
    tests/test_accelerate.py)."""
    assert tome_swin_r(7) == 16 and tome_swin_r(12) == 47
    new = accelerate_config(config, 'tome')
    assert new.model.backbone.type == 'mmvitaccel.ToMeSwinTransformer'
    assert new.model.backbone.r == 16 and new.model.backbone.prop_attn
    host, ours = _backbones(config)
    x = torch.rand(1, 3, 256, 256)
    with torch.no_grad():
        expected, merged = host(x), ours(x)
    assert [m.shape for m in merged] == [e.shape for e in expected]


def test_flops_ratio_is_refused_on_a_swin_by_name():
    with pytest.raises(ValueError, match='flops_ratio'):
        accelerate_config(MMDET_SWIN, 'tome', flops_ratio=0.6)


TINY_MASK_RCNN = '''
_base_ = '{base}'
model = dict(
    backbone=dict(embed_dims=16, depths=(1, 1, 2, 1), num_heads=(1, 2, 2, 4),
                  init_cfg=None),
    neck=dict(in_channels=[16, 32, 64, 128]))
'''


@pytest.mark.slow
def test_tools_test_runs_tome_mask_rcnn_on_upstream_weights(
        tmp_path, tiny_data_dir):
    """``tools/accelerate.py`` on a user's Mask R-CNN Swin config, then
    ``tools/test.py NEW_CONFIG UPSTREAM_CKPT``: the runner loads the
    upstream detector's checkpoint with every tensor loaded, nothing new,
    missing or unused, and tests on tiny COCO."""
    config, checkpoint, state = user_checkpoint(
        tmp_path, 'mask_rcnn', TINY_MASK_RCNN.format(base=MMDET_SWIN), 'mmdet')
    assert_tools_test_loads_everything(
        config, checkpoint, state, 'tome', tmp_path, tiny_data_dir,
        ignore=('relative_position_index', ))
