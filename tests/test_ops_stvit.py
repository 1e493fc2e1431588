"""STViT initial cluster centres (mmvitaccel.ops.stvit)."""
from collections import OrderedDict

import pytest
import torch
import torch.nn.functional as F

from mmvitaccel.ops import (IntraInterPooling, adaptive_bins, bin_indices,
                            pad_to_multiple, pool_centres, stvit,
                            window_partition)
from mmvitaccel.ops import host_sync
from mmvitaccel.ops.host_sync import recorded_host_copies
from mmvitaccel.apis.torch_version import DEPLOY_TORCH, torch_release

from .tolerance import assert_equal, assert_rounding_close


def test_adaptive_bins_match_torch():
    assert adaptive_bins(7, 3) == [(0, 3), (2, 5), (4, 7)]
    assert adaptive_bins(14, 4) == [(0, 4), (3, 7), (7, 11), (10, 14)]
    with pytest.raises(ValueError, match='cannot pool'):
        adaptive_bins(3, 4)


@pytest.mark.parametrize('window,out', [((7, 7), (3, 3)), ((14, 14), (4, 4)),
                                        ((5, 7), (3, 2))])
@pytest.mark.parametrize('mode', ['max', 'avg'])
def test_pool_equals_torch_adaptive_pooling(window, out, mode):
    x = torch.randn(6, window[0] * window[1], 8)
    centres, valid = pool_centres(x, window, out, mode)
    grid = x.transpose(1, 2).reshape(6, 8, *window)
    ref = (F.adaptive_max_pool2d if mode == 'max' else F.adaptive_avg_pool2d)(
        grid, out).flatten(2).transpose(1, 2)
    assert valid.all()
    if mode == 'max':
        assert_equal(centres, ref)
    else:  # bins of <= 4 x 4 tokens summed in another order, / count
        assert_rounding_close(centres, ref, 16 + 1, float(x.abs().max()))


@pytest.mark.parametrize('mode', ['max', 'avg'])
def test_pool_ignores_padding(mode):
    # a 9x12 map padded to 14x14: bins fully inside the padding are invalid
    x = torch.randn(2, 9, 12, 4)
    xp, valid_map = pad_to_multiple(x, 7)
    noisy = xp.clone()
    noisy[:, ~valid_map] = 100 * torch.randn_like(noisy[:, ~valid_map])
    valid = window_partition(valid_map, 7)
    c1, v1 = pool_centres(window_partition(xp, 7), (7, 7), (3, 3), mode,
                          valid)
    c2, v2 = pool_centres(window_partition(noisy, 7), (7, 7), (3, 3), mode,
                          valid)
    assert_equal(c1, c2)  # the padding never enters a valid bin's sum
    assert torch.equal(v1, v2)
    # window (1, 0) holds local rows 0-1 only: the bin rows 2-4 and 4-6 lie
    # in the padding; window (0, 1) holds local cols 0-4: all bins valid
    assert v1.shape == (8, 9)
    assert v1[2].view(3, 3)[0].all() and not v1[2].view(3, 3)[1:].any()
    assert v1[1].all() and v1[3].view(3, 3)[0].all()
    assert (c1[~v1] == 0).all()
    # a valid centre is the max over the valid tokens of its bin only
    if mode == 'max':
        window = window_partition(xp, 7)[2].view(7, 7, 4)
        assert_equal(c1[2, 0], window[0:2, 0:3].amax((0, 1)))


def test_intra_inter_starts_as_average_pooling():
    x = torch.randn(4, 49, 16)
    pool = IntraInterPooling(16, (7, 7), (3, 3))
    centres, valid = pool(x)
    avg, _ = pool_centres(x, (7, 7), (3, 3), 'avg')
    # uniform softmax weights over a bin of <= 3 x 3 tokens and the 3 x 3
    # mixing, against the bin sums / count: n = 9 + 9 + 9, scale max |x|
    assert_rounding_close(centres, avg, 27, float(x.abs().max()))
    assert valid.all()
    # parameters: f_intra Linear(C, 1) without bias, f_inter Linear(C, 9)
    # and the 9x9 mixing across the 3x3 grid of bins
    assert sum(p.numel() for p in pool.parameters()) == \
        16 + 16 * 9 + 9 + 9 * 9
    assert pool.intra.bias is None


def _randomised_pool(C=8, window=(7, 7), out=(3, 3), seed=0):
    torch.manual_seed(seed)
    pool = IntraInterPooling(C, window, out)
    for p in pool.parameters():  # small enough not to saturate the softmax
        torch.nn.init.normal_(p, std=0.3)
    return pool


def test_f_inter_mixes_across_windows():
    """f_inter relates the windows (bins) of the grid: a change confined
    to one bin moves the centres of the other bins too."""
    pool = _randomised_pool()
    x = torch.randn(2, 49, 8)
    y = x.clone()
    y[:, 0] += 3.  # token (0, 0) lies in bin 0 only
    with torch.no_grad():
        cx, _ = pool(x)
        cy, _ = pool(y)
    moved = (cx - cy).abs().amax(-1)  # (N, 9)
    # 1e-4: far above float32 rounding of these O(1) centres (~1e-6)
    assert (moved[:, 1:] > 1e-4).all()
    # without the mixing (identity) only bin 0 moves, as a per-token f_inter
    with torch.no_grad():
        pool.inter_mix.copy_(torch.eye(9))
        cx, _ = pool(x)
        cy, _ = pool(y)
    assert torch.equal(cx[:, 1:], cy[:, 1:])


def test_every_pooling_parameter_gets_a_gradient():
    """Gradients reach f_intra, f_inter's projection and its mixing
    through a non-trivial readout; at the average-pooling init, f_intra
    and the projection already get one (so training can start)."""
    from .utils import assert_clear_gradients, random_readout
    x = torch.randn(3, 49, 8)
    pool = _randomised_pool()
    random_readout(pool(x)[0]).backward()
    assert_clear_gradients(pool.named_parameters())
    fresh = IntraInterPooling(8, (7, 7), (3, 3))
    random_readout(fresh(x)[0]).backward()
    assert_clear_gradients((n, p) for n, p in fresh.named_parameters()
                           if n != 'inter_mix')


def test_intra_inter_learns_and_ignores_padding():
    torch.manual_seed(0)
    pool = IntraInterPooling(8, (7, 7), (3, 3))
    for p in pool.parameters():
        torch.nn.init.normal_(p)
    x = torch.randn(1, 10, 10, 8)
    xp, valid_map = pad_to_multiple(x, 7)
    valid = window_partition(valid_map, 7)
    noisy = xp.clone()
    noisy[:, ~valid_map] = 50 * torch.randn_like(noisy[:, ~valid_map])
    c1, v1 = pool(window_partition(xp, 7), valid)
    c2, _ = pool(window_partition(noisy, 7), valid)
    assert_equal(c1, c2)  # the padding's weight is exactly 0
    c1[v1].sum().backward()
    assert pool.intra.weight.grad.abs().sum() > 0
    assert pool.inter.weight.grad.abs().sum() > 0


def test_uneven_bins():
    index, present = bin_indices((5, 5), (3, 3))
    assert index.shape == (9, 9)  # bins of 2x2, 2x3, 3x3 ... padded to 9
    assert present.sum() == sum((e - s) * (e2 - s2)
                                for s, e in adaptive_bins(5, 3)
                                for s2, e2 in adaptive_bins(5, 3))


def test_unknown_mode_refused():
    with pytest.raises(ValueError, match='unknown pooling mode'):
        pool_centres(torch.zeros(1, 49, 2), (7, 7), (3, 3), 'median')


@pytest.fixture
def builds(monkeypatch):
    """An empty store of kept constants for the test, and the list of the
    bin tables built (window, out, device)."""
    monkeypatch.setattr(host_sync, '_constants', OrderedDict())
    built, build = [], stvit._build_bin_indices

    def counted(window, out, device):
        built.append((window, out, device.type))
        return build(window, out, device)

    counted.__wrapped__ = lambda window, out: build(window, out, 'cpu')
    monkeypatch.setattr(stvit, '_build_bin_indices', counted)
    return built


def test_bin_tables_are_built_once_per_shape_and_device(builds):
    """Pooling on a device (``meta`` here) copies the bin tables from the
    host once per window, bins and device: later forwards copy nothing.
    (Before they were kept, every call made them with ``torch.tensor``.)"""
    x = torch.randn(4, 49, 8, device='meta')
    pool = IntraInterPooling(8, (7, 7), (3, 3)).to('meta')
    with recorded_host_copies() as copies:
        for _ in range(3):
            pool_centres(x, (7, 7), (3, 3))
            pool(x)
    assert not copies, copies
    assert builds == [((7, 7), (3, 3), 'cpu'), ((7, 7), (3, 3), 'meta')]
    kept = stvit._bin_tables((7, 7), (3, 3), 'meta')
    assert stvit._bin_tables([7, 7], [3, 3], torch.device('meta'))[0] is \
        kept[0]
    assert stvit._bin_tables((7, 7), (3, 3))[0].device.type == 'cpu'
    pool_centres(x, (7, 7), (2, 2))  # another grid: its own tables
    assert builds[-1] == ((7, 7), (2, 2), 'meta') and len(builds) == 3
    # bounded: the least recently used tables go first
    for n in range(1, host_sync.MAX_DEVICE_CONSTANTS + 1):
        stvit._bin_tables((n, 1), (1, 1))
    assert len(host_sync._constants) == host_sync.MAX_DEVICE_CONSTANTS
    assert stvit._bin_tables((7, 7), (3, 3), 'meta')[0] is not kept[0]


def test_kept_bin_tables_are_never_modified(builds):
    """``bin_indices`` hands out copies; the forwards only read the kept
    tables (their version counters do not move through a training step,
    one window without a mask: the tables' own views reach the pooling);
    a kept table modified anyway is built afresh on the next call."""
    fresh = bin_indices((7, 7), (3, 3))
    kept = stvit._bin_tables((7, 7), (3, 3))
    assert fresh[0] is not kept[0] and torch.equal(fresh[0], kept[0])
    fresh[0].zero_()
    fresh[1].zero_()
    versions = [t._version for t in kept]
    pool = IntraInterPooling(4, (7, 7), (3, 3))
    for p in pool.parameters():
        torch.nn.init.normal_(p)
    x = torch.randn(1, 49, 4, requires_grad=True)
    (pool(x)[0].sum() + pool_centres(x, (7, 7), (3, 3))[0].sum()).backward()
    assert [t._version for t in kept] == versions
    assert stvit._bin_tables((7, 7), (3, 3))[0] is kept[0]
    assert torch.equal(bin_indices((7, 7), (3, 3))[1], kept[1])
    fresh_tables = stvit._build_bin_indices.__wrapped__
    kept[0].zero_()  # a caller breaking the rule
    again = stvit._bin_tables((7, 7), (3, 3))
    assert again[0] is not kept[0] and torch.equal(
        again[0], fresh_tables((7, 7), (3, 3))[0])


def test_bin_tables_kept_under_inference_mode_serve_training(builds):
    """Built first under ``torch.inference_mode`` (an evaluation before
    training), the kept tables are ordinary tensors: autograd, which saves
    the index for the backward pass, accepts them later."""
    pool = IntraInterPooling(4, (7, 7), (3, 3))
    x = torch.randn(2, 49, 4)
    with torch.inference_mode():
        ref = pool(x)[0]
    assert builds and not any(t.is_inference()
                              for t in stvit._bin_tables((7, 7), (3, 3)))
    x.requires_grad_(True)
    out = pool(x)[0]
    out.sum().backward()
    assert x.grad is not None and torch.equal(out.detach(), ref)


@pytest.mark.skipif(
    torch_release() < DEPLOY_TORCH,
    reason='torch.export(strict=...) and the deployment captures need torch '
    '>= 2.5 (refused by name before)')
def test_bin_tables_under_graph_capture(builds):
    """``torch.compile`` and ``torch.export`` (strict: Dynamo; non-strict:
    fake tensors) record the tables as constants of the graph, whether or
    not eager mode kept them before, and keep nothing of their own (no
    fake tensor is left for eager mode); the same kernels: equal."""
    x = torch.randn(4, 49, 8)

    def centres(windows):
        return pool_centres(windows, (7, 7), (3, 3))[0]

    out = torch.compile(centres, backend='eager', fullgraph=True)(x)
    assert not host_sync._constants
    assert torch.equal(out, centres(x))  # eager: kept now
    host_sync._constants.clear()
    pool = IntraInterPooling(8, (7, 7), (3, 3)).eval()
    host_sync._constants.clear()  # (the constructor sizes from the tables)
    ep = torch.export.export(pool, (x, ), strict=False)
    assert not host_sync._constants
    ref = pool(x)[0]  # eager: kept now
    assert torch.equal(ep.module()(x)[0], ref)
    kept = stvit._bin_tables((7, 7), (3, 3))
    ep = torch.export.export(pool, (x, ), strict=True)
    assert torch.equal(ep.module()(x)[0], ref)
    assert list(host_sync._constants) == [(('stvit.bin_indices', (7, 7),
                                            (3, 3)), torch.device('cpu'))]
    assert all(type(t) is torch.Tensor for t in kept)
    assert stvit._bin_tables((7, 7), (3, 3))[0] is kept[0]
