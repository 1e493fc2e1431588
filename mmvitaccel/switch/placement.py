"""Each method of :func:`~mmvitaccel.switch.accelerate_config`: the hosts
it fits, its paper's setting, and where its layers go on a host of any
depth (``docs/accelerate.md`` states the rules). The Swin methods are
placed here, the ViT methods and HViT in :mod:`.vit_placement`.

The papers place their layers on Swin-T/S/B and Video Swin-T/S/B. On
another depth the placement follows the rule below, which gives the
papers' own choices on their sizes:

* ``stvit-r``: all of stage 3 in dumbbell units of 6 blocks (the paper:
  "each dumbbell unit contains 6 transformer layers"; Swin-T one unit,
  Swin-S/B three). The stage's depth must be a multiple of 6.
* ``stvit``: STGM-1 at 0-based block ``round((2 d - 6) / 3)`` of the
  ``d``-block stage 3: the paper's blocks 3-4 of Swin-T (``d = 6``, index
  2) and 11-12 of Swin-S/B (``d = 18``, index 10), on the line through
  them (``move_stgm``: ``round(1 + (d - 6) / 12)`` blocks earlier, the
  paper's 1 and 2). At least one block must follow the STGM.
* ``dgssa``: the first ``P = N / 2`` of the ``N`` blocks static, from the
  second on (the paper: P = 6 of Swin-T's 12 blocks, 12 of Swin-S/B's
  24, "the first layer remains dynamic").

Windows: the papers' semantic and key windows are for Swin's 7x7 window;
a host with a ``w x w`` window gets them scaled by ``w / 7`` (rounded; the
semantic window stays 3).
"""
from dataclasses import dataclass

from mmvitaccel.models.dgssa.static_attention import \
    static_blocks_for as dgssa_static_blocks
from mmvitaccel.models.stvit.semantic_checks import \
    stgm_index_for as stvit_stgm_index
from mmvitaccel.switch.host_classes import HOST_NAMES
from mmvitaccel.switch.swin_hosts import swin3d_host_args, swin_host_args
from mmvitaccel.switch.switch_options import check_options

__all__ = ['METHODS', 'Method', 'Upstream', 'method_backbone',
           'methods_for', 'stvit_stgm_index', 'dgssa_static_blocks']


@dataclass(frozen=True)
class Method:
    """A method of the switch.

    Attributes:
        type (dict[str, str]): host kind -> our backbone's registered name.
        training_free (str): whether it runs on the host's weights
            unchanged, and how (for the docs and the tool's help).
        distils (bool): it fine-tunes from the upstream weights with the
            upstream model as its frozen teacher, so it needs them
            (``checkpoint``).
    """
    type: dict
    training_free: str
    distils: bool = False


@dataclass
class Upstream:
    """What a placement may read of the upstream config beside its host.

    Attributes:
        cfg (mmengine.Config): the merged upstream config.
        config (str | dict): how a teacher names it: a ``toolbox::path``, a
            file, or its model dict.
        checkpoint (str | None): the upstream weights the new model starts
            from (``load_from``).
    """
    cfg: object
    config: object
    checkpoint: str = None


_NO_TRAINING = 'yes: the host\'s weights unchanged; nothing is new'

#: the methods of the switch
METHODS = {
    'stvit-r': Method(
        dict(swin='STViTRSwinTransformer'),
        'yes: the dumbbell units reuse the host blocks (STGM and recovery '
        'attention start from them); fine-tuning recovers the rest'),
    'stvit': Method(
        dict(swin='STViTSwinTransformer', swin3d='STViTSwinTransformer3D'),
        'no: the patch merging after stage 3 becomes a new linear layer '
        '(expand)'),
    'dgssa': Method(
        dict(swin='DGSSASwinTransformer'),
        'with static_init="dg" once tools/dgssa_init.py has written the '
        'static logits from the host on data; otherwise fine-tune'),
    'tis': Method(dict(vit='TokenPrunedVisionTransformer'), _NO_TRAINING),
    'cls': Method(dict(vit='TokenPrunedVisionTransformer'), _NO_TRAINING),
    'sait': Method(
        dict(vit='TokenPrunedVisionTransformer'),
        'as tis with the mass selector; SaiT fine-tunes with its dense/sparse '
        'epochs and TIS distillation', distils=True),
    'asvit': Method(
        dict(vit='TokenPrunedVisionTransformer'),
        'no: the learnable thresholds are trained with the budget loss',
        distils=True),
    'integrated': Method(
        dict(vit='DGSSAVisionTransformer'),
        'no: the GLAD aggregations are new; the static logits come from '
        'tools/dgssa_init.py', distils=True),
    'tome': Method(dict(vit='ToMeVisionTransformer',
                        swin='ToMeSwinTransformer'), _NO_TRAINING),
    'hvit': Method(
        dict(swin='HViTSwinTransformer', vit='HViTDeiT',
             pvtv2='HViTPyramidVisionTransformerV2'),
        'no: the hallucination filters and the compact FFN are new'),
}

#: the papers' windows for Swin's 7x7 window, by toolbox kind: dense
#: (mmdet, mmseg: the authors' detection code) or classification/video
_PAPER_WINDOW = 7
_STVIT_R_DENSE = dict(semantic_window=3, key_windows=(14, 21),
                      key_region='centred', recovery_window=27,
                      pooling='max', stgm2_keys='semantic_and_image')
_STVIT_CLASSIFY = dict(semantic_window=3, key_windows=(10, 14),
                       key_region='inside', pooling='max',
                       stgm2_keys='semantic_and_image')
DENSE = ('mmdet', 'mmseg')


def _scaled(windows, window_size):
    return tuple(max(window_size, round(k * window_size / _PAPER_WINDOW))
                 for k in windows)


def _stvit_r(host, options, upstream):
    stage = host.depths[2]
    if 'num_units' not in options and (stage < 6 or stage % 6):
        raise ValueError(
            f'stvit-r turns stage 3 into dumbbell units of 6 blocks; '
            f'this host\'s stage 3 has {stage} blocks (give num_units '
            'for fewer units)')
    dense = host.toolbox in DENSE
    setting = dict(_STVIT_R_DENSE if dense else _STVIT_CLASSIFY)
    if not dense:
        setting['recovery_window'] = _STVIT_R_DENSE['recovery_window']
    w = host.window_size
    setting['key_windows'] = _scaled(setting['key_windows'], w)
    setting['recovery_window'] = _scaled((setting['recovery_window'], ),
                                         w)[0]
    return dict(swin_host_args(host), **setting), {}


def _stvit(host, options, upstream):
    setting = dict(_STVIT_CLASSIFY,
                   key_windows=_scaled(_STVIT_CLASSIFY['key_windows'],
                                       host.window_size),
                   stgm_index=stvit_stgm_index(
                       host.depths[2], options.get('move_stgm', False)))
    if host.kind == 'swin3d':
        return dict(swin3d_host_args(host), **setting), {}
    extra = {}
    if host.toolbox in DENSE:
        setting['out_type'] = 'featmap'
    else:  # the paper's head reads the mean of the semantic tokens
        setting['out_type'] = 'avg'
        extra['model.neck'] = None
    return dict(swin_host_args(host), **setting), extra


def _dgssa(host, options, upstream):
    setting = dict(static_blocks=dgssa_static_blocks(host.depths),
                   static_start=1, static_init='dg')
    return dict(swin_host_args(host), **setting), {
        'optim_wrapper.paramwise_cfg.custom_keys': {
            'static_logits': dict(decay_mult=0.)}}


def methods_for(kind):
    """The methods that fit a host of ``kind`` (a value of
    :data:`~.host_classes.HOST_KINDS`), in :data:`METHODS` order."""
    return [name for name, spec in METHODS.items() if kind in spec.type]


def _placers():
    from mmvitaccel.switch import vit_placement
    return {'stvit-r': _stvit_r, 'stvit': _stvit, 'dgssa': _dgssa,
            **vit_placement.PLACERS}


def method_backbone(method, host, options, upstream):
    """``method``'s backbone on ``host``, and its other config changes.

    Args:
        method (str): a key of :data:`METHODS`.
        host (~mmvitaccel.switch.host_classes.Host): the upstream backbone.
        options (dict): backbone arguments set over the rest.
        upstream (Upstream): the upstream config and weights.

    Returns:
        tuple[dict, dict]: the backbone config (with ``type``) and other
        changes by dotted key (``'model.neck'``, ``'load_from'``, ...).

    Raises:
        ValueError: an unknown method, a host it does not fit (naming the
            methods that fit it), a distilling method with no upstream
            weights, or options the backbone does not take
            (:func:`~.switch_options.check_options`).
    """
    if method not in METHODS:
        raise ValueError(f'unknown method {method!r}; choose from '
                         f'{sorted(METHODS)}')
    spec = METHODS[method]
    if host.kind not in spec.type:
        fits = '; '.join(f'{k}: {HOST_NAMES[k]}' for k in spec.type)
        raise ValueError(
            f'{method} does not fit the {host.toolbox} {host.type} of this '
            f'config; it fits: {", ".join(spec.type)} hosts ({fits}); the '
            f'methods that fit this backbone: '
            f'{", ".join(methods_for(host.kind))}')
    if spec.distils and not upstream.checkpoint:
        raise ValueError(
            f'{method} fine-tunes from the upstream weights, with the '
            f'upstream model as its frozen teacher: give checkpoint= '
            f'(--checkpoint), or set load_from in the config')
    args, extra = _placers()[method](host, options, upstream)
    backbone = dict(type=f'mmvitaccel.{spec.type[host.kind]}', **args)
    backbone.update(options)
    check_options(method, backbone, options, host.toolbox)
    if upstream.checkpoint:
        extra.setdefault('load_from', upstream.checkpoint)
    return backbone, extra
