"""Every config's backbone runs on the ``meta`` device.

A ``meta`` tensor has a shape and no value: reading one on the host
(``.item()``, ``bool(t)``, ``int(t)``, ``.tolist()``) raises, and so does a
tensor made on the CPU inside a forward and mixed with ``meta`` ones. A
forward that completes on ``meta`` therefore makes its decisions from
shapes, which on a GPU means no device-to-host synchronisation. The only
value reads allowed go through :func:`mmvitaccel.ops.host_read`, under the
reasons of :data:`mmvitaccel.ops.HOST_READS`, which ``docs/guarantees.md``
lists.

The other direction, a host-to-device copy (a tensor made from Python data
on the device, a CPU tensor moved there), works on ``meta`` and is recorded
instead (:func:`~mmvitaccel.ops.host_sync.recorded_host_copies`, with
``meta`` as the device): a forward makes none but the first build of a
kept constant (:func:`~mmvitaccel.ops.host_sync.device_constant`).

Each config is built with its tiny overrides (``tests/utils.py``); a
backbone that several configs share is built and run once. Windowed
backbones run once on an input that needs no padding, in eval mode
(inference paths: dropped tokens, unmasked attention), and once on one
that needs padding in every stage, in train mode (masked tokens, drop
path); the ViT/DeiT ones, built for one patch grid, twice at 224.

On the CPU, where masks can be read for free, the host's decisions are
compared with what the masks hold (:func:`test_host_decisions_match_the_masks`,
:func:`test_host_facts_equal_the_device_masks`).
"""
import functools
import glob
import itertools
import json
import os.path as osp
import sys
from collections import OrderedDict

import pytest
import torch
from mmengine.config import Config
from mmengine.config import config as mm_config
from mmengine.config import utils as mm_config_utils
from mmengine.registry import DefaultScope, init_default_scope

from mmvitaccel.apis.torch_version import torch_release
from mmvitaccel import ops
from mmvitaccel.ops import HOST_READS, host_sync, recorded_host_reads, windows
from mmvitaccel.ops.host_sync import device_constant, recorded_host_copies
from mmvitaccel.registry import MODELS

from .utils import REPO, TINY_MODELS

CONFIGS = sorted(
    osp.relpath(p, REPO) for p in glob.glob(osp.join(REPO, 'configs/*.py')))

#: (B, C, H, W) inputs of the image backbones (sizes cost nothing on
#: ``meta``): the first needs no padding (Swin at 224: 56, 28, 14, 7 tokens
#: per side, multiples of the 7x7 windows; STViT's key regions then cover
#: most of the map: their dense form), the second pads in every stage
#: (106x114, 53x57, 27x29, 14x15; regions gathered per window)
IMAGE_INPUTS = ((2, 3, 224, 224), (2, 3, 424, 456))
#: backbones built for one patch grid (ViT/DeiT): the first input twice
FIXED_GRID = ('VisionTransformer', 'DeiT')
#: clips (B, C, T, H, W) of the video backbones
VIDEO_INPUTS = ((1, 3, 4, 224, 224), (1, 3, 4, 424, 456))
#: a backbone option the configs leave out, run in addition
#: (``batch_mode='mean'`` cuts a batch to its mean kept count)
EXTRA = {'configs/asvit_deit_s_in1k.py': {'batch_mode': 'mean'},
         'configs/tome_swin_t_coco.py': {'design': 'stage'}}


@pytest.fixture(scope='module', autouse=True)
def _fast_config_parsing():
    """mmengine resolves a ``mmpretrain::`` base by loading every metafile
    of the package, each time, and re-imports the package to see that it
    is installed (most of the time of ``Config.fromfile`` here): both
    memoized for this module, the same results."""
    load = mm_config_utils.load
    metafile = functools.lru_cache(maxsize=None)(load)

    def memoized_load(file, *args, **kwargs):
        if args or kwargs or not isinstance(file, str):
            return load(file, *args, **kwargs)
        return metafile(file)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mm_config_utils, 'load', memoized_load)
        mp.setattr(mm_config, 'is_installed', functools.lru_cache(
            maxsize=None)(mm_config.is_installed))
        yield


def _backbone_cfg(config):
    cfg = Config.fromfile(osp.join(REPO, config))
    cfg.merge_from_dict({k: v for k, v in TINY_MODELS[config].items()
                         if not k.startswith('tiny.')})
    backbone = cfg.model.backbone.to_dict()
    for weights in ('init_cfg', 'pretrained'):  # what the weights are
        backbone.pop(weights, None)
    return cfg.get('default_scope', 'mmpretrain'), backbone


def _build(scope, backbone):
    init_default_scope(scope)
    with DefaultScope.overwrite_default_scope(scope):
        return MODELS.build(backbone)


#: what has run: backbone key -> the host-read reasons recorded
_RAN = {}
#: backbone key -> the host-to-device copies recorded, in words
_COPIES = {}
#: the configs whose backbones have run
_DONE = set()


def _run_on_meta(key, scope, backbone):
    """Build once (on the CPU: some upstream constructors read values),
    move to ``meta``, run every input; returns the reasons recorded (and
    keeps the host-to-device copies recorded in ``_COPIES``)."""
    if key in _RAN:
        return _RAN[key]
    model = _build(scope, backbone)
    model.to('meta')
    name = type(model).__name__
    inputs = VIDEO_INPUTS if name.endswith('3D') else \
        IMAGE_INPUTS[:1] * 2 if name.endswith(FIXED_GRID) else IMAGE_INPUTS
    with recorded_host_reads() as seen, recorded_host_copies() as copies:
        for shape, train in zip(inputs, (False, True)):
            model.train(train)
            with torch.set_grad_enabled(train):
                outs = model(torch.randn(shape, device='meta'))
            outs = outs if isinstance(outs, (tuple, list)) else (outs, )
            assert outs and all(
                o.device.type == 'meta'
                for o in outs if isinstance(o, torch.Tensor))
    _RAN[key] = dict(seen)
    _COPIES[key] = sorted(set(copies))
    return _RAN[key]


@pytest.mark.parametrize('config', CONFIGS)
def test_backbone_runs_on_meta(config):
    assert config in TINY_MODELS, f'{config} has no tiny model'
    scope, backbone = _backbone_cfg(config)
    runs = [backbone]
    if config in EXTRA:
        runs.append({**backbone, **EXTRA[config]})
    for cfg in runs:
        key = (scope, json.dumps(cfg, sort_keys=True, default=str))
        seen = _run_on_meta(key, scope, cfg)
        assert set(seen) <= set(HOST_READS), (
            f'{config}: host reads for unlisted reasons {set(seen)}')
        assert not _COPIES[key], (
            f'{config}: host-to-device copies in the forward {_COPIES[key]}')
    _DONE.add(config)


def test_host_copies_are_recorded(monkeypatch):
    """The recorder of the meta runs sees each way of making a tensor from
    host data on a device, and nothing else: not device-side factories,
    not CPU work, not a moved device tensor, not the first build of a
    :func:`~mmvitaccel.ops.host_sync.device_constant` (whose later calls
    copy nothing and return the kept tensors)."""
    monkeypatch.setattr(host_sync, '_constants', OrderedDict())
    on = torch.zeros(4, 2, device='meta')
    host = torch.zeros(4, 2)
    copies = [
        lambda: torch.tensor([1, 2], device='meta'),
        lambda: torch.as_tensor([1., 2.], device='meta'),
        lambda: torch.as_tensor(host, device='meta'),
        lambda: torch.asarray([[1]], device='meta'),
        lambda: host.to('meta'),
        lambda: host.to(device='meta', dtype=torch.float16),
        lambda: host.to(on),
        lambda: on.new_tensor([1, 2]),
        lambda: on.clone().copy_(host),
        lambda: on[[0, 2]],
    ]
    if torch_release() >= (2, 2):  # before, indexing by a tensor and item
        # assignment bypass torch function modes (the recorder cannot see)
        copies += [lambda: on[torch.tensor([0, 2])],
                   lambda: on.clone().__setitem__(0, host[0])]
    for make in copies:
        with recorded_host_copies() as seen:
            make()
        assert len(seen) == 1, (make.__code__.co_firstlineno, seen)
    none = [
        lambda: torch.tensor([1, 2]),
        lambda: torch.as_tensor(on),
        lambda: torch.zeros(3, device='meta'),
        lambda: torch.arange(3, device='meta'),
        lambda: on.to('meta'),
        lambda: on.new_zeros(3),
        lambda: host.to(torch.float16),
        lambda: host[[0, 2]],
        lambda: on[0, 1:],
        lambda: on[torch.arange(2, device='meta')],
        lambda: on.clone().copy_(on),
    ]
    with recorded_host_copies() as seen:
        for make in none:
            make()
        first = device_constant(('test', 3), lambda device: (
            torch.tensor([1, 2, 3], device=device), ), 'meta')
    assert not seen, seen
    with recorded_host_copies() as seen:
        again = device_constant(('test', 3), lambda device: (
            torch.tensor([1, 2, 3], device=device), ), 'meta')
    assert again[0] is first[0] and not seen


def test_host_reads_are_documented_and_taken():
    """Every listed reason is in docs/guarantees.md and is taken by some
    backbone above (the list holds no stale entry); the backbones without
    token pruning read nothing."""
    if _DONE != set(CONFIGS):
        pytest.skip('needs the meta runs of every config')
    doc = open(osp.join(REPO, 'docs/guarantees.md')).read()
    for reason in HOST_READS:
        assert f'`{reason}`' in doc, f'{reason} is not in guarantees.md'
    taken = set().union(*_RAN.values())
    assert taken == set(HOST_READS)
    for (_, cfg), seen in _RAN.items():
        if 'TokenPruned' not in json.loads(cfg)['type']:
            assert not seen, (cfg, seen)


#: image sizes of the CPU runs: stage maps 28, 14, 7 (no padding where the
#: methods work), and 25x29, 13x15, 7x8 (padding)
CPU_SIZES = ((112, 112), (100, 116))
#: configs that take every host decision of the windowed layouts: 2-D and
#: video STViT, STViT-R's dumbbell units in the authors' form and its
#: single recovery in the paper's form, DGSSA
WINDOWED = ('configs/stvit_swin_t_in1k.py', 'configs/stvit_swin_t_k400.py',
            'configs/stvit_r_swin_s_authors_in1k.py',
            'configs/stvit_r_swin_s_nodumbbell_coco.py',
            'configs/dgssa_swin_t_in1k.py')


@pytest.mark.parametrize('config', WINDOWED)
def test_host_decisions_match_the_masks(config, monkeypatch):
    """On the CPU, where masks can be read for free: every "all valid?"
    the backbone decides on the host equals what its mask holds, every
    count of covered windows equals the one in the mask, and no mask is
    left to be read (no call without host facts)."""
    decided, read = [], []
    mask_or_none, covered_coords = windows.mask_or_none, \
        windows._covered_coords

    def checked_mask_or_none(valid, all_valid=None):
        (read if all_valid is None else decided).append(all_valid)
        if all_valid is not None:
            assert all_valid == bool(valid.all())
        return mask_or_none(valid, all_valid)

    def checked_coords(covered, window, size, tokens, count=None):
        assert count == int(covered.sum(1).max())
        return covered_coords(covered, window, size, tokens, count)

    for module in list(sys.modules.values()):
        if module is not None and module.__name__.startswith('mmvitaccel') \
                and getattr(module, 'mask_or_none', None) is mask_or_none:
            monkeypatch.setattr(module, 'mask_or_none', checked_mask_or_none)
    monkeypatch.setattr(windows, '_covered_coords', checked_coords)
    model = _build(*_backbone_cfg(config))
    model.eval()  # (mmpretrain's train() returns None)
    clip = (4, ) if config.endswith('_k400.py') else ()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: threads only cost here
    try:
        with torch.no_grad():
            for hw in CPU_SIZES:
                model(torch.randn(1, 3, *clip, *hw))
    finally:
        torch.set_num_threads(threads)
    assert decided and not read, (len(decided), len(read))
    # the unpadded input takes the unmasked attention somewhere
    assert any(decided)


@pytest.mark.parametrize('hw', [(14, 14), (13, 15), (28, 35), (27, 29)])
def test_host_facts_equal_the_device_masks(hw):
    """The facts :mod:`mmvitaccel.ops.host_masks` computes from shapes
    equal what the masks built from ``pad_to_multiple``'s mask hold, and
    gathering with the host-known count of covered windows is the same as
    with the count read from the mask."""
    w = 7
    x, valid = ops.pad_to_multiple(torch.zeros(1, *hw, 1), w)
    padded = tuple(valid.shape)
    assert torch.equal(ops.host_valid(hw, padded), valid)
    assert ops.unpadded(hw, padded) == bool(valid.all())
    for t in (1, 3):
        valid_w = ops.window_partition(valid, w)
        sem = ops.pool_centres(torch.zeros(valid_w.shape[0], w * w, 1),
                               (w, w), (t, t), valid=valid_w)[1]
        grid_valid = ops.window_reverse(
            sem[..., None], t, padded[0] // w * t, padded[1] // w * t)[0, ...,
                                                                      0]
        assert torch.equal(ops.semantic_valid_host(hw, padded, w, t),
                           grid_valid)
        assert ops.semantic_all_valid(hw, padded, w, t) == bool(sem.all())
        extent = ops.semantic_extent(hw, padded, w, t)
        assert torch.equal(ops.host_valid(extent, grid_valid.shape),
                           grid_valid)
        grid = torch.randn(1, *grid_valid.shape, 2)
        for size, placement in itertools.product(
                (7, 10, 14, 21), ops.REGION_PLACEMENTS):
            region = (size, placement)
            keys, mask = ops.region_windows_with_tokens(
                x, valid, grid, grid_valid, w, *region, hw=hw)
            read = ops.region_windows_with_tokens(x, valid, grid,
                                                  grid_valid, w, *region)
            assert torch.equal(keys, read[0]) and torch.equal(mask, read[1])
            assert ops.regions_all_valid(hw, padded, w, *region, t) == \
                bool(mask.all())
            dense = torch.cat(
                (ops.covered_tokens_mask(valid, w, size, t, placement)
                 & grid_valid.reshape(1, -1),
                 ops.neighbourhood_mask(valid, w, *region)), dim=1)
            assert ops.regions_all_valid(hw, padded, w, *region, t,
                                         dense=True) == bool(dense.all())
            assert ops.regions_all_valid(hw, padded, w, *region) == bool(
                ops.neighbourhood_windows(x, valid, w, *region)[1].all())
            assert ops.regions_all_valid(hw, padded, w, *region,
                                         dense=True) == bool(
                ops.neighbourhood_mask(valid, w, *region).all())
