"""STViT-R-Swin: the ablations of the paper's Table 9 (no dumbbell units,
semantic tokens generated once) and the defaults they must not change."""
import hashlib
import os.path as osp

import pytest
import torch
from mmdet.models.backbones.swin import SwinBlock
from mmengine.config import Config

import mmvitaccel  # noqa: F401
from mmvitaccel.models import STViTRSwinTransformer
from mmvitaccel.models.stvit import CrossAttentionSwinBlock
from mmvitaccel.models.stvit import dumbbell_swin_stage
from mmvitaccel.models.stvit.dumbbell_swin_stage import (
                                                         DumbbellSwinBlockSequence,
                                                         SingleRecoverySwinBlockSequence,
                                                         stage_roles)
from mmvitaccel.models.stvit.semantic_swin_stage import \
    SemanticSwinBlockSequence
from mmvitaccel.models.stvit.stvit_authors import authors_stgm
from mmvitaccel.ops import pad_to_multiple, window_reverse
from mmvitaccel.registry import MODELS

from .utils import (assert_clear_gradients, assert_padding_invariant,
                    random_readout)

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))

# stage 3 of 12 blocks: two dumbbell units, or the single layout with its
# STGM at blocks 5, 6, semantic blocks 7-10 and the recovery at 11
TINY = dict(embed_dims=32, depths=(1, 1, 12, 1), num_heads=(1, 2, 4, 8),
            drop_path_rate=0.)
AUTHORS = dict(stem='conv', stgm_form='authors', layer_scale=1e-5,
               key_region='inside', kv_per_region=True, global_centres=True,
               centre_units='first')


def _build(**kwargs):
    """A seeded tiny model in eval mode; layer scales (1e-5 at init) set to
    1 so that every branch visibly moves the outputs and gradients."""
    torch.manual_seed(0)
    model = STViTRSwinTransformer(**{**TINY, **kwargs})
    model.init_weights()
    for name, p in model.named_parameters():
        if '.gamma1.' in name or '.gamma2.' in name:
            torch.nn.init.ones_(p)
    model.eval()  # mmdet's Swin.train() returns None: no chaining
    return model


def _reference_units(stage, x, hw_shape):
    """The dumbbell units as written before the Table 9 options (every unit
    pools its own initial centres), from the stage's parts."""
    B, _, C = x.shape
    H, W = hw_shape
    w, s = stage.window_size, stage.semantic_window
    x, valid = pad_to_multiple(x.view(B, H, W, C), w)
    _, Hp, Wp, _ = x.shape
    nh, nw = Hp // w, Wp // w
    for u in range(stage.num_units):
        img, stgm1, stgm2, local, glob, rec = stage.blocks[6 * u:6 * u + 6]
        x = img(x, valid)
        if stage.stgm_form == 'authors':
            windows, sem, sem_valid = authors_stgm(
                stage, u, stage._centres(u), stgm1, stgm2, x, valid)
        else:
            windows, sem, sem_valid = SemanticSwinBlockSequence.generate(
                stage, u, stgm1, stgm2, x, valid)
        sem = stage.attend_local(local, sem, sem_valid)
        sem = stage.attend_global(glob, sem.reshape(B, -1, C), sem_valid)
        sem = sem.view(B * nh * nw, s * s, C)
        grid = window_reverse(rec.key_values(sem), s, nh * s, nw * s)
        grid_valid = window_reverse(sem_valid[..., None], s, nh * s,
                                    nw * s)[0, ..., 0]
        windows = stage.attend_regions(rec, windows, grid, grid_valid, s,
                                       stage.recovery_window)
        x = window_reverse(windows, w, Hp, Wp)
    return x[:, :H, :W].reshape(B, H * W, C)


@pytest.mark.parametrize('kwargs', [
    dict(pooling='intra_inter', global_centres=True), AUTHORS])
def test_defaults_bit_identical_to_the_units_before_the_options(kwargs):
    model = _build(**kwargs)
    stage = model.stages[2]
    assert type(stage) is DumbbellSwinBlockSequence
    assert not stage.semantic_reuse and model.layout == 'dumbbell'
    x = torch.randn(2, 10 * 15, 32 * 4)  # stage-3 tokens, needs padding
    with torch.no_grad():
        ours = stage(x, (10, 15))[2]
        assert torch.equal(ours, _reference_units(stage, x, (10, 15)))


def _backbone(cfg):
    backbone = dict(cfg.model.backbone)
    backbone.pop('init_cfg', None)
    return MODELS.build(backbone)


#: state-dict keys of every STViT-R config before the Table 9 options:
#: (count, sha256 of the keys joined by newlines)
KEYS = {
    'stvit_r_swin_b_authors_in1k': (359, 'b04e082c3d04'),
    'stvit_r_swin_b_coco': (365, '70e086ea50fe'),
    'stvit_r_swin_b_in1k': (321, '5c0ce6a121fd'),
    'stvit_r_swin_s_authors_in1k': (359, 'b04e082c3d04'),
    'stvit_r_swin_s_coco': (365, '70e086ea50fe'),
    'stvit_r_swin_s_in1k': (321, '5c0ce6a121fd'),
    'stvit_r_swin_s_upernet_ade20k': (365, '70e086ea50fe'),
}


def _keys(config):
    cfg = Config.fromfile(osp.join(REPO, 'configs', f'{config}.py'))
    return list(_backbone(cfg).state_dict())


@pytest.mark.slow
@pytest.mark.parametrize('config', sorted(KEYS))
def test_checkpoint_names_of_every_config_unchanged(config):
    keys = _keys(config)
    digest = hashlib.sha256('\n'.join(keys).encode()).hexdigest()[:12]
    assert (len(keys), digest) == KEYS[config]


@pytest.mark.slow
def test_reuse_config_has_the_parent_names():
    assert _keys('stvit_r_swin_s_reuse_coco') == \
        _keys('stvit_r_swin_s_coco')


# --- without dumbbell units --------------------------------------------------

def test_single_layout_roles_of_swin_s():
    semantic = ('semantic_local', 'semantic_global') * 5
    head = ('swin', ) * 5 + ('stgm1', 'stgm2')
    assert stage_roles('single', 18, stgm_index=5, num_recovery=1) == \
        head + semantic + ('recovery', )
    roles = head + semantic[:9] + ('recovery', ) * 2
    assert stage_roles('single', 18, stgm_index=5, num_recovery=2) == roles
    cfg = Config.fromfile(
        osp.join(REPO, 'configs', 'stvit_r_swin_s_nodumbbell_coco.py'))
    model = _backbone(cfg)
    stage = model.stages[2]
    assert type(stage) is SingleRecoverySwinBlockSequence
    assert model.roles == roles
    assert (stage.stgm_index, stage.num_recovery) == (5, 2)
    for i, block in enumerate(stage.blocks):
        if i < 5:  # Swin's own blocks, shifts as Swin: W, SW, W, SW, W
            assert type(block) is SwinBlock
            assert block.attn.shift_size == (3 if i % 2 else 0)
        else:
            assert isinstance(block, CrossAttentionSwinBlock)
    assert len(stage.global_centres or ()) <= 1


def _record_calls(stage):
    calls = []
    for i, block in enumerate(stage.blocks):
        block.register_forward_hook(
            lambda m, args, out, i=i: calls.append((i, args[0].shape[-2])))
    return calls


def test_single_layout_runs_the_blocks_in_their_roles():
    model = _build(layout='single')
    calls = _record_calls(model.stages[2])
    with torch.no_grad():
        model(torch.randn(1, 3, 150, 100))  # stage 3: 10x7, 2 windows
    assert [i for i, _ in calls] == list(range(12))
    tokens = dict(calls)  # per attention call; dense forms join windows
    assert all(tokens[i] == 70 for i in range(5))  # Swin: the 10x7 map
    assert tokens[5] in (9, 18) and tokens[6] in (9, 18)  # STGM
    assert tokens[7] == tokens[9] == 9  # local: one window's 3x3
    assert tokens[8] == 18  # global: 2 windows x 9
    assert tokens[10] in (49, 98) and tokens[11] in (49, 98)  # recovery


@pytest.mark.parametrize('kwargs', [
    dict(), dict(pooling='intra_inter', stgm_index=6, num_recovery=1),
    AUTHORS])
def test_single_layout_shapes_padding_and_gradients(kwargs, monkeypatch):
    model = _build(layout='single', **kwargs)
    x = torch.randn(1, 3, 150, 100)  # stage 3: 10x7 -> padded to 14x7
    ref = _build(**{k: v for k, v in kwargs.items()
                    if k not in ('stgm_index', 'num_recovery')})
    assert [o.shape for o in model(x)] == [o.shape for o in ref(x)]
    assert_padding_invariant(model, x, dumbbell_swin_stage, monkeypatch)
    model.train()
    random_readout(model(torch.randn(2, 3, 64, 96))).backward()
    assert_clear_gradients(
        (n, p) for n, p in model.stages[2].named_parameters()
        if not n.endswith('inter_mix'))


# --- semantic tokens generated once -----------------------------------------

def _capture(module, store, key, output=False):
    """Keep the first output (or first positional input) of ``module``."""

    def keep(m, args, out=None):
        store.setdefault(key, out if output else args[0])

    if output:
        module.register_forward_hook(keep)
    else:
        module.register_forward_pre_hook(keep)


@pytest.mark.parametrize('kwargs', [dict(), AUTHORS])
@pytest.mark.parametrize('source', ['previous_unit', 'first_stgm'])
def test_reuse_later_units_start_from_the_earlier_tokens(kwargs, source):
    model = _build(semantic_reuse=True, reuse_from=source, **kwargs)
    stage = model.stages[2]
    pooled = []
    pool = stage._fixed_pooling
    stage._fixed_pooling = lambda *a, **k: pooled.append(1) or pool(*a, **k)
    seen = {}
    earlier = stage.blocks[4] if source == 'previous_unit' else \
        stage.blocks[2]
    _capture(earlier, seen, 'earlier', output=True)
    _capture(stage.blocks[7], seen, 'initial')  # unit 2's STGM-1 queries
    with torch.no_grad():
        model(torch.randn(1, 3, 150, 100))
    assert len(pooled) == 1  # the first unit only
    earlier, initial = seen['earlier'], seen['initial']
    torch.testing.assert_close(initial.reshape(-1, 32 * 4),
                               earlier.reshape(-1, 32 * 4), rtol=0, atol=0)


@pytest.mark.parametrize('kwargs', [dict(pooling='intra_inter'), AUTHORS])
def test_reuse_shapes_padding_and_every_parameter_used(kwargs, monkeypatch):
    model = _build(semantic_reuse=True, **kwargs)
    stage = model.stages[2]
    if stage.poolers is not None:  # one learnable pooling: no unused ones
        assert len(stage.poolers) == 1
        for p in stage.poolers.parameters():
            torch.nn.init.normal_(p)
    x = torch.randn(1, 3, 150, 100)
    ref = _build(**kwargs)
    outs = model(x)
    assert [o.shape for o in outs] == [o.shape for o in ref(x)]
    # reuse changes the stage (~5-10% of its largest output here); float32
    # rounding alone would change it by ~1e-6 of that
    assert (outs[2] - ref(x)[2]).abs().max() > 1e-2 * outs[2].abs().max()
    assert_padding_invariant(model, x, dumbbell_swin_stage, monkeypatch)
    model.train()
    random_readout(model(torch.randn(2, 3, 64, 96))).backward()
    assert_clear_gradients(
        (n, p) for n, p in stage.named_parameters()
        if not n.endswith('inter_mix'))


@pytest.mark.parametrize('kwargs, error, match', [
    (dict(layout='dumbbells'), ValueError, "unknown layout 'dumbbells'"),
    (dict(reuse_from='last'), ValueError, "unknown reuse_from 'last'"),
    (dict(semantic_reuse='yes'), TypeError, 'semantic_reuse must be True'),
    (dict(reuse_from='first_stgm'), ValueError, 'set semantic_reuse=True'),
    (dict(semantic_reuse=True, num_units=1), ValueError, 'num_units >= 2'),
    (dict(stgm_index=5), ValueError, "drop stgm_index"),
    (dict(layout='single', num_units=1), ValueError, 'drop num_units'),
    (dict(layout='single', semantic_reuse=True), ValueError,
     "layout='single' has one STGM"),
    (dict(layout='single', mask_padding=False), ValueError,
     'mask_padding=False'),
    (dict(num_recovery=2), ValueError, "drop num_recovery"),
    (dict(layout='single', num_recovery=0), ValueError,
     r'num_recovery must be an int in 1\.\.10'),
    (dict(layout='single', stgm_index=10), ValueError,
     r'stgm_index must be an int in 0\.\.8'),
    (dict(layout='single', stgm_index=5.0), TypeError, 'stgm_index'),
])
def test_bad_variant_options_fail_at_build(kwargs, error, match):
    with pytest.raises(error, match=match):
        STViTRSwinTransformer(**{**TINY, **kwargs})
