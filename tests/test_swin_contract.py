"""Our Swin backbones keep the contract of the upstream class they
subclass, built with the same arguments: the output maps at odd input
sizes and every ``out_indices``, ``frozen_stages`` (what upstream freezes,
plus our new parameters inside the frozen stages) and ``with_cp`` (the same
outputs and gradients as without)."""
import copy

import pytest
import torch
from mmengine.registry import DefaultScope

import mmvitaccel  # noqa: F401
from mmvitaccel.registry import MODELS

#: a small Swin with a stage 3 deep enough for every method: 6 blocks (one
#: STViT-R dumbbell unit, STViT's STGM at block 2)
SIZES = dict(embed_dims=32, depths=(2, 2, 6, 2), num_heads=(1, 2, 4, 8),
             window_size=7, drop_path_rate=0.)

#: ours -> (its upstream class's scope and type, our extra arguments)
SWINS = {
    'STViTSwinTransformer': ('mmdet', dict(out_type='featmap')),
    'STViTRSwinTransformer': ('mmdet', dict()),
    'DGSSASwinTransformer': ('mmdet', dict(static_init='uniform')),
    'HViTSwinTransformer': ('mmpretrain', dict()),
    'ToMeSwinTransformer': ('mmdet', dict(r=8)),
}


def _build(type_, scope, **kwargs):
    """Args: type_ (str): ours or upstream's (no scope). scope (str).
    Returns: nn.Module: built in ``scope`` (ours as ``mmvitaccel.X``)."""
    args = dict(SIZES, **kwargs)
    if scope == 'mmpretrain':  # mmpretrain's Swin takes an arch dict
        args['arch'] = dict(embed_dims=args.pop('embed_dims'),
                            depths=list(args.pop('depths')),
                            num_heads=list(args.pop('num_heads')))
        args.setdefault('img_size', 224)
    with DefaultScope.overwrite_default_scope(scope):
        return MODELS.build(dict(type=type_, **args))


def _pair(ours, **kwargs):
    """Args: ours (str): a key of SWINS. Returns: (ours, upstream)."""
    scope, extra = SWINS[ours]
    torch.manual_seed(0)
    model = _build(f'mmvitaccel.{ours}', scope, **extra, **kwargs)
    torch.manual_seed(0)
    host = _build('SwinTransformer', scope, **kwargs)
    return model, host


def _outcome(model, x):
    """Args: model, x. Returns: list[tuple] | str: the output shapes, or
    the class of the error the forward raised."""
    model.eval()  # (mmdet's Swin.train returns None: no chaining)
    try:
        with torch.no_grad():
            return [tuple(o.shape) for o in model(x)]
    except (AssertionError, ValueError, RuntimeError) as e:
        return type(e).__name__


@pytest.mark.parametrize('ours', sorted(SWINS))
@pytest.mark.parametrize('size', [(65, 97), (224, 224)])
def test_output_maps_at_odd_sizes_and_every_out_index(ours, size):
    """Equal to upstream's, also where upstream refuses (mmpretrain's Swin
    on a map smaller than its window without ``pad_small_map``). The one
    documented difference: STViT-Swin's maps after its semantic stage are
    of semantic tokens, ``w_s = 3`` per side of each 7x7 window of stage 3,
    for stage 3 and 4 alike (no patch merging after it; ``docs/stvit.md``;
    STViT-R's recovery restores the patch map)."""
    model, host = _pair(ours, out_indices=(0, 1, 2, 3))
    x = torch.rand(1, 3, *size)
    got, want = _outcome(model, x), _outcome(host, x)
    if isinstance(want, str) and SWINS[ours][0] == 'mmpretrain':
        # ours pads a map smaller than its window, as upstream does with
        # pad_small_map=True: the same maps
        want = _outcome(_pair(ours, out_indices=(0, 1, 2, 3),
                              pad_small_map=True)[1], x)
    if ours == 'STViTSwinTransformer':  # stages 3 and 4: semantic tokens
        h, w = want[2][2:]
        for i in (2, 3):
            want[i] = (1, want[i][1], -(-h // 7) * 3, -(-w // 7) * 3)
    assert got == want, (got, want)


@pytest.mark.parametrize('ours', sorted(SWINS))
def test_frozen_stages_freeze_upstreams_and_our_parameters(ours):
    model, host = _pair(ours, frozen_stages=2)
    for m in (model, host):
        m.train()
    frozen_up = {n for n, p in host.named_parameters() if not p.requires_grad}
    ours_frozen = {n for n, p in model.named_parameters()
                   if not p.requires_grad}
    shared = {n for n, _ in model.named_parameters()} & \
        {n for n, _ in host.named_parameters()}
    assert frozen_up & shared <= ours_frozen
    assert frozen_up, 'upstream froze nothing: the check checks nothing'
    # nothing of ours inside the frozen stages trains, the rest does
    stages = 'stages' if hasattr(model, 'stages') else 'layers'
    for name, p in model.named_parameters():
        if name.startswith(f'{stages}.0.') or name.startswith(
                f'{stages}.1.') or name.startswith('patch_embed.'):
            assert not p.requires_grad, name
        elif name.startswith(f'{stages}.3.'):
            assert p.requires_grad, name


@pytest.mark.parametrize('ours', sorted(SWINS))
def test_with_cp_gives_the_same_outputs_and_gradients(ours):
    scope, extra = SWINS[ours]
    torch.manual_seed(0)
    plain = _build(f'mmvitaccel.{ours}', scope, **extra,
                   out_indices=(0, 1, 2, 3))
    checkpointed = copy.deepcopy(plain)
    for module in checkpointed.modules():
        if hasattr(module, 'with_cp'):
            module.with_cp = True
    x = torch.rand(1, 3, 64, 96)
    outs = []
    for m in (plain, checkpointed):
        m.train()
        out = m(x)
        sum(o.float().pow(2).mean() for o in out).backward()
        outs.append(([o.detach() for o in out],
                     {n: p.grad.clone() for n, p in m.named_parameters()
                      if p.grad is not None}))
    (a, ga), (b, gb) = outs
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert ga.keys() == gb.keys()
    # recomputation runs the same kernels: equal gradients
    assert all(torch.equal(ga[k], gb[k]) for k in ga)


@pytest.mark.parametrize('ours', sorted(SWINS))
def test_a_checkpoint_at_another_input_size_loads(ours, tmp_path):
    """A Swin's weights do not depend on the input size (relative position
    tables depend on the window, DGSSA's static logits on the window's
    tokens): ours built for 384 load a checkpoint of ours built for 224,
    every tensor, as upstream does."""
    scope, extra = SWINS[ours]
    size_key = 'img_size' if scope == 'mmpretrain' else 'pretrain_img_size'
    small = _build(f'mmvitaccel.{ours}', scope, **extra, **{size_key: 224})
    path = str(tmp_path / 'small.pth')
    torch.save(dict(state_dict=small.state_dict()), path)
    large = _build(f'mmvitaccel.{ours}', scope, **extra, **{
        size_key: 384,
        'init_cfg': dict(type='Pretrained', checkpoint=path)})
    large.init_weights()
    report = large.load_report
    assert report['missing'] == [] and report['mismatched'] == [], report
    for name, value in small.state_dict().items():
        assert torch.equal(large.state_dict()[name], value), name
