"""What ``tools/accelerate.py --list`` prints (:func:`method_options_text`):
each method's hosts and its backbone's own options, with the values the
switch writes on the paper's host."""
from mmengine.config import Config

from mmvitaccel.switch.hosts import find_host
from mmvitaccel.switch.placement import Upstream, method_backbone
from mmvitaccel.switch.switch_options import (_class_name, _defaults, _own,
                                              _upstream_class, backbone_class)

__all__ = ['method_options_text']


#: the papers' host of each kind, as a config's scope and backbone: where
#: ``--list`` shows the setting the switch writes
_PAPER_HOSTS = {
    'swin': ('mmdet', dict(type='SwinTransformer'), 'mmdet Swin-T'),
    'swin3d': ('mmaction', dict(type='SwinTransformer3D', arch='tiny'),
               'mmaction Video Swin-T'),
    'vit': ('mmpretrain', dict(type='VisionTransformer', arch='deit-small'),
            'mmpretrain DeiT-S'),
    'pvtv2': ('mmdet', dict(type='PyramidVisionTransformerV2', embed_dims=32,
                            num_layers=[2, 2, 2, 2]), 'mmdet PVTv2-b0'),
}


def _paper_setting(method, kind):
    """The backbone the switch writes for ``method`` on the paper's host of
    ``kind`` ({} where that host does not build here)."""
    scope, backbone, _ = _PAPER_HOSTS[kind]
    cfg = Config(dict(default_scope=scope, model=dict(
        type='ImageClassifier', backbone=backbone,
        head=dict(type='LinearClsHead'))))
    try:
        written, _ = method_backbone(method, find_host(cfg), {},
                                     Upstream(cfg, 'UPSTREAM', 'UPSTREAM.pth'))
    except (ImportError, ValueError, TypeError, KeyError):
        return {}  # the backbone's own defaults are listed
    return written


def method_options_text(methods):
    """What ``tools/accelerate.py --list`` prints: each method's hosts, how
    far it runs training-free, and its backbone's own option keys with
    their defaults: the value the switch writes on the paper's host
    (placed by the rules of :mod:`.placement` on another), else the
    backbone's default. Every argument of the upstream backbone is an
    option too (carried from the host: ``arch``, ...).

    Args:
        methods (dict): :data:`~.placement.METHODS`.

    Returns:
        str: lines of text.
    """
    lines = []
    for name, spec in methods.items():
        lines.append(f'{name}: hosts {", ".join(spec.type)}; training-free: '
                     f'{spec.training_free}')
        for kind, type_ in spec.type.items():
            cls = backbone_class(type_)
            written = _paper_setting(name, kind)
            own = {k: written.get(k, v) for k, v in _own(cls).items()
                   if k != 'arch'}
            lines.append(f'  {kind}: mmvitaccel.{type_} options (as written '
                         f'on {_PAPER_HOSTS[kind][2]}): {_defaults(own)}; '
                         'and the arguments of '
                         f'{_class_name(_upstream_class(cls))}')
    return '\n'.join(lines)
