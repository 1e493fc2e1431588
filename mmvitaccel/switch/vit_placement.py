"""The ViT methods of the switch (``tis``, ``cls``, ``sait``, ``asvit``,
``integrated``) and HViT on its three hosts: their papers' settings, placed
on a host of any depth and token count (``docs/accelerate.md``).

The papers place their layers on 12-layer DeiTs with ``N = 196`` patch
tokens (224 px, 16 px patches). On an ``L``-layer host with ``N`` patches:

* every layer index ``l`` of the paper becomes ``round(l L / 12)``:
  SaiT's (and the training-free scorers') selection before layer 3, AS-ViT's
  pruning before layers 4, 7 and 10, Integrated-DeiT's static layers 1-2
  and GLAD layers 3, 5, 7 (indices that collide move one layer on);
* AS-ViT's thresholds (0.001, 0.002, 0.003) and ``tau = 1e-4`` are
  scores of one patch, whose mean is ``1 / N``: they scale by ``196 / N``
  (as the digits study scaled them for 64 patches);
* Integrated-DeiT's GLAD token counts keep the paper's shares of the
  ``N + 1`` tokens: 127, 77, 35 of 197 (its DeiT-S/B setting), or 157,
  107, 57 on a DeiT-T (192 wide, 3 heads, 12 layers), which the paper lets
  keep more.

ToMe merges in every layer: ``r`` keeps the paper's share of merged
tokens (13 of 196 a layer in 12 layers) on the host's ``N`` and ``L``. On a
Swin host every window merges ``r = round(16 w^2 / 49)`` tokens in every
block (16 of a 7x7 window; there is no paper setting for Swin).

HViT needs no placement: hMHSA goes into every layer (stage) whose head
count halves, cFFN everywhere.

The distilling methods fine-tune the upstream model from its weights
(``load_from``) with the same model, frozen, as the teacher: AS-ViT's
logit distillation from the dense DeiT, Integrated-DeiT's GLAD and logit
distillation from the pretrained DeiT, and SaiT's TIS distillation, whose
paper teacher is DINO ViT-S (a config option, ``model.teacher``).
"""
from mmvitaccel.switch.hosts import vit_host_args, pvtv2_host_args
from mmvitaccel.switch.swin_hosts import mmpretrain_swin_args, swin_host_args

__all__ = ['PLACERS', 'scaled_layers', 'glad_tokens', 'tome_r',
           'tome_swin_r']

#: the papers' host: 12 layers, 196 patch tokens
_PAPER_LAYERS, _PAPER_PATCHES = 12, 196


def scaled_layers(layers, num_layers, first=1):
    """The paper's 0-based layer indices on a ``num_layers``-layer host.

    Args:
        layers (Sequence[int]): indices on the 12-layer DeiT.
        num_layers (int): the host's layers.
        first (int): the smallest index allowed.

    Returns:
        tuple[int]: ``round(l num_layers / 12)``, increasing (a collision
        moves one layer on).

    Raises:
        ValueError: the host is too shallow for them.
    """
    out = []
    for layer in layers:
        index = max(first, round(layer * num_layers / _PAPER_LAYERS))
        if out and index <= out[-1]:
            index = out[-1] + 1
        out.append(index)
    if out and out[-1] >= num_layers:
        raise ValueError(
            f'the paper\'s layers {tuple(layers)} of 12 do not fit a host of '
            f'{num_layers} layers (they became {tuple(out)})')
    return tuple(out)


#: Integrated-DeiT's GLAD token counts of 197 (class token included)
_GLAD_SB = (127, 77, 35)
_GLAD_TINY = (157, 107, 57)


def glad_tokens(num_patches, tiny=False):
    """Integrated-DeiT's GLAD token counts for ``num_patches`` patches.

    Args:
        num_patches (int): the host's patch tokens ``N``.
        tiny (bool): the host is a DeiT-T (the paper's tiny shares).

    Returns:
        tuple[int]: ``round(share (N + 1))`` each, decreasing, at least 2.
    """
    paper = _GLAD_TINY if tiny else _GLAD_SB
    total = num_patches + 1
    out, prev = [], total
    for count in paper:
        m = min(prev - 1, max(2, round(count * total / (_PAPER_PATCHES + 1))))
        out.append(m)
        prev = m
    if len(set(out)) < len(out) or out[-1] < 2:
        raise ValueError(f'{num_patches} patch tokens are too few for '
                         f'Integrated-DeiT\'s three GLAD steps')
    return tuple(out)


def _num_layers(host):
    return host.depths[0]


def _scorer(scorer):
    def place(host, options, upstream):
        """Training-free pruning: the paper scorer's tokens kept at
        SaiT's location, by value (density 0.5) unless options say
        otherwise (``merge_pruned=True``: prune and merge); the classifier
        stays the upstream one."""
        args = dict(vit_host_args(host),
                    prune_before=scaled_layers((3, ), _num_layers(host)),
                    scorer=scorer, selector='value', density=0.5,
                    test_execution='drop')
        if options.get('merge_pruned'):  # prune and merge: drop in training
            args['train_execution'] = 'drop'
        return args, {}
    return place


def _teacher(upstream, method):
    """The upstream classifier as the frozen teacher; refused for a model
    that is not an mmpretrain ``ImageClassifier`` with a head."""
    model = upstream.cfg.model
    if str(model.get('type')).split('.')[-1] != 'ImageClassifier' or \
            model.get('head') is None:
        raise ValueError(
            f'{method} fine-tunes a classifier with its labels and distils '
            f'the upstream one: this config\'s model ({model.get("type")}, '
            f'head {model.get("head") and model.head.get("type")}) is not an '
            f'mmpretrain ImageClassifier with a head (tis and cls run on a '
            f'headless one)')
    return dict(config=upstream.config, checkpoint=upstream.checkpoint)


def _sait(host, options, upstream):
    """SaiT-M0.7: TIS mass selection before layer 3, masked logits in
    training, dense and sparse epochs alternating, TIS distillation
    (beta 4) from the frozen upstream model."""
    backbone = dict(vit_host_args(host),
                    prune_before=scaled_layers((3, ), _num_layers(host)),
                    scorer='tis', selector='mass', mass_threshold=0.7,
                    density=0.5, mask_mode='logits', batch_mode='pad')
    hooks = list(upstream.cfg.get('custom_hooks') or [])
    hooks.append(dict(type='mmvitaccel.DenseSparseAlternateHook', period=2))
    return backbone, {
        'model.type': 'mmvitaccel.TokenPrunedClassifier',
        'model.teacher': _teacher(upstream, 'sait'),
        'model.distill_weight': 0.,
        'model.tis_distill_weight': 4.,
        'model.test_cfg': dict(mass_threshold=0.7),
        'custom_hooks': hooks,
    }


def _asvit(host, options, upstream):
    """AS-ViT: learnable thresholds before layers 4, 7, 10 (scaled by
    196 / N with tau), the budget loss at 0.65 (lambda1 2), the logit KL
    from the frozen upstream model (lambda2 0.5)."""
    scale = _PAPER_PATCHES / host.num_patches
    backbone = dict(vit_host_args(host),
                    prune_before=scaled_layers((4, 7, 10),
                                               _num_layers(host)),
                    scorer='asvit', selector='threshold',
                    thresholds=tuple(t * scale
                                     for t in (0.001, 0.002, 0.003)),
                    tau=1e-4 * scale, mask_mode='policy', batch_mode='pad')
    return backbone, {
        'model.type': 'mmvitaccel.TokenPrunedClassifier',
        'model.teacher': _teacher(upstream, 'asvit'),
        'model.distill_weight': 0.5,
        'model.token_distill_weight': 0.,
        'model.budget': 0.65,
        'model.budget_weight': 2.,
        'model.test_cfg': dict(batch_mode='pad'),
        'optim_wrapper.paramwise_cfg.custom_keys': {
            '.thresholds': dict(decay_mult=0.)},
    }


def _integrated(host, options, upstream):
    """Integrated-DeiT: DGSSA in layers 1-2, GLAD at 3, 5, 7 with the
    paper's token shares, GLAD and logit distillation from the frozen
    upstream backbone and head."""
    _teacher(upstream, 'integrated')  # the same classifier check
    num_layers = _num_layers(host)
    static = scaled_layers((1, 2), num_layers)
    glad = scaled_layers((3, 5, 7), num_layers, first=static[-1] + 1)
    args = vit_host_args(host)
    backbone = dict(args, static_layers=static, static_init='dg',
                    glad_layers=glad,
                    glad_tokens=glad_tokens(host.num_patches, tiny=(
                        host.embed_dims, host.num_heads, num_layers) == (
                            192, (3, ), 12)))
    teacher = {k: v for k, v in args.items() if k != 'init_cfg'}
    teacher['type'] = f'{host.toolbox}.{host.type}'
    head = dict(upstream.cfg.model.head)
    head.pop('init_cfg', None)
    head.pop('loss', None)
    if '.' not in head['type']:
        head['type'] = f'{host.toolbox}.{head["type"]}'
    head['init_cfg'] = dict(type='Pretrained', checkpoint=upstream.checkpoint,
                            prefix='head.')
    return backbone, {
        'model.type': 'mmvitaccel.GLADDistillClassifier',
        'model.teacher': teacher,
        'model.teacher_checkpoint': upstream.checkpoint,
        'model.teacher_head': head,
        'model.distill_weight': 1.,
        'model.kd_weight': 1.,
        'optim_wrapper.paramwise_cfg.custom_keys': {
            '.static_logits': dict(decay_mult=0.)},
    }


def _hvit(host, options, upstream):
    """hMHSA in every layer/stage whose heads halve, cFFN everywhere."""
    setting = dict(hmhsa=True, cffn=True, cffn_ratio=0.5, cffn_branches=2)
    if host.kind == 'vit':
        heads = host.num_heads[0]
        ffn = (host.args.get('layer_cfgs') or {}).get('ffn_type', 'origin')
        if ffn != 'origin' and options.get('cffn', True) is not False:
            raise ValueError(
                f'hvit\'s cFFN factors the second linear layer of an mmcv '
                f'FFN; this ViT\'s layers use layer_cfgs.ffn_type={ffn!r} '
                f'(give cffn=False for hMHSA alone)')
        if heads % 2 and options.get('hmhsa', True) is True:
            raise ValueError(
                f'hvit halves the attention maps of every layer (hMHSA), '
                f'which needs an even head count; this ViT has {heads} '
                f'heads (give hmhsa=False for cFFN alone)')
        return dict(vit_host_args(host), **setting), {}
    if host.kind == 'pvtv2':
        return dict(pvtv2_host_args(host), **setting), {}
    return dict(mmpretrain_swin_args(host), **setting), {}


#: ToMe's DeiT-S setting (12 layers, 196 patches): 13 tokens a layer
_TOME_R = 13


def tome_r(num_patches, num_layers):
    """ToMe's ``r`` on a host: the paper's 13 of 196 patches a layer in 12
    layers, keeping the share merged over the depth.

    Args:
        num_patches (int): the host's patch tokens ``N``.
        num_layers (int): its layers ``L``.

    Returns:
        int: ``max(1, round(13 (N / 196) (12 / L)))``.
    """
    return max(1, round(_TOME_R * num_patches / _PAPER_PATCHES *
                        _PAPER_LAYERS / num_layers))


#: ToMe's tokens merged in each 7x7 window of a Swin host
_TOME_SWIN_R, _SWIN_WINDOW = 16, 7


def tome_swin_r(window_size):
    """ToMe's ``r`` in a ``w x w`` window: ``round(16 w^2 / 49)``."""
    return round(_TOME_SWIN_R * window_size**2 / _SWIN_WINDOW**2)


def _tome(host, options, upstream):
    """ToMe training-free: ``r`` by :func:`tome_r` (:func:`tome_swin_r` on
    a Swin) unless ``r`` or ``flops_ratio`` is given; proportional
    attention on."""
    if host.kind == 'swin':
        return dict(swin_host_args(host), prop_attn=True,
                    r=tome_swin_r(host.window_size)), {}
    args = dict(vit_host_args(host), prop_attn=True)
    if 'flops_ratio' in options:
        args['r'] = None
    else:
        args['r'] = tome_r(host.num_patches, _num_layers(host))
    return args, {}


#: method -> placement function ``(host, options, upstream) -> (backbone
#: arguments, other changes)``
PLACERS = {'tis': _scorer('tis'), 'cls': _scorer('cls'), 'sait': _sait,
           'asvit': _asvit, 'integrated': _integrated, 'hvit': _hvit,
           'tome': _tome}
