"""Each method of :func:`~mmvitaccel.apis.accelerate_config`: the hosts
it fits, its paper's setting, and where its layers go on a host of any
depth (``docs/accelerate.md`` states the rules).

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

__all__ = ['METHODS', 'Method', 'method_backbone', 'stvit_stgm_index',
           'dgssa_static_blocks']


@dataclass(frozen=True)
class Method:
    """A method of the switch.

    Attributes:
        type (dict[str, str]): host kind -> our backbone's registered name.
        training_free (str): whether it runs on the host's weights
            unchanged, and how (for the docs and the tool's help).
    """
    type: dict
    training_free: str


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
_DENSE = ('mmdet', 'mmseg')
#: the host kinds, as a refusal names them
_HOST_NAMES = ('swin: mmpretrain/mmdet/mmseg SwinTransformer; swin3d: '
               'mmaction SwinTransformer3D')


def stvit_stgm_index(depth, move_stgm=False):
    """STGM-1's 0-based block in an STViT stage of ``depth`` blocks.

    Args:
        depth (int): the stage's blocks.
        move_stgm (bool): the paper's "move STGM" variant, ``round(1 +
            (d - 6) / 12)`` blocks earlier: 1 for Swin-T, 2 for Swin-S/B.

    Raises:
        ValueError: when no block would follow the STGM.
    """
    index = round((2 * depth - 6) / 3)
    if move_stgm:
        index -= round(1 + (depth - 6) / 12)
    if index < 0 or index + 2 >= depth:
        raise ValueError(
            f'stvit needs stage 3 deep enough for its STGM (2 blocks) and '
            f'a semantic block after it; this host\'s stage 3 has {depth} '
            'blocks (Swin-T has 6)')
    return index


def dgssa_static_blocks(depths):
    """DGSSA's static block count ``P`` for a Swin of ``depths``."""
    total = sum(depths)
    if total < 4:
        raise ValueError(f'dgssa needs at least 4 blocks, the host has '
                         f'{total}')
    return total // 2


def _scaled(windows, window_size):
    return tuple(max(window_size, round(k * window_size / _PAPER_WINDOW))
                 for k in windows)


def method_backbone(method, host, options):
    """``method``'s backbone on ``host``, and its other config changes.

    Args:
        method (str): a key of :data:`METHODS`.
        host (~mmvitaccel.apis.hosts.Host): the upstream backbone.
        options (dict): backbone arguments set over the rest.

    Returns:
        tuple[dict, dict]: the backbone config (with ``type``) and other
        changes by dotted key (``'model.neck'``, ...).

    Raises:
        ValueError: an unknown method, or a host it does not fit.
    """
    if method not in METHODS:
        raise ValueError(f'unknown method {method!r}; choose from '
                         f'{sorted(METHODS)}')
    spec = METHODS[method]
    if host.kind not in spec.type:
        raise ValueError(
            f'{method} does not fit the {host.toolbox} {host.type} of this '
            f'config; it fits: {", ".join(sorted(spec.type))} hosts '
            f'({_HOST_NAMES})')
    dense = host.toolbox in _DENSE
    backbone = dict(type=f'mmvitaccel.{spec.type[host.kind]}', **host.args)
    extra = {}
    w = host.window_size
    if method == 'stvit-r':
        stage = host.depths[2]
        if 'num_units' not in options and (stage < 6 or stage % 6):
            raise ValueError(
                f'stvit-r turns stage 3 into dumbbell units of 6 blocks; '
                f'this host\'s stage 3 has {stage} blocks (give num_units '
                'for fewer units)')
        setting = dict(_STVIT_R_DENSE if dense else _STVIT_CLASSIFY)
        if not dense:
            setting['recovery_window'] = _STVIT_R_DENSE['recovery_window']
        setting['key_windows'] = _scaled(setting['key_windows'], w)
        setting['recovery_window'] = _scaled(
            (setting['recovery_window'], ), w)[0]
        backbone.update(setting)
    elif method == 'stvit':
        backbone.update(_STVIT_CLASSIFY,
                        key_windows=_scaled(_STVIT_CLASSIFY['key_windows'],
                                            w),
                        stgm_index=stvit_stgm_index(
                            host.depths[2], options.get('move_stgm', False)))
        if host.kind == 'swin':
            if dense:
                backbone['out_type'] = 'featmap'
            else:  # the paper's head reads the mean of the semantic tokens
                backbone['out_type'] = 'avg'
                extra['model.neck'] = None
    elif method == 'dgssa':
        backbone.update(static_blocks=dgssa_static_blocks(host.depths),
                        static_start=1, static_init='dg')
        extra['optim_wrapper.paramwise_cfg.custom_keys'] = {
            'static_logits': dict(decay_mult=0.)}
    backbone.update(options)
    return backbone, extra
