"""Attention statistics of a pretrained DGSSA host over a dataset, shared by
``tools/dgssa_init.py`` and ``tools/glad_search.py``."""
import copy
import warnings

import torch
from mmengine.registry import init_default_scope
from mmengine.runner import Runner
from mmengine.utils import ProgressBar

from mmvitaccel.models.dgssa.dgssa_swin import DGSSASwinTransformer
from mmvitaccel.models.dgssa.dgssa_vit import DGSSAVisionTransformer
from mmvitaccel.models.dgssa.static_attention import (vit_attention,
                                                      window_attention)
from mmvitaccel.ops import AttentionStats, attention_to_logits
from mmvitaccel.registry import MODELS

HOSTS = ('DGSSAVisionTransformer', 'DGSSASwinTransformer')


def build_host_backbone(cfg, checkpoint=None):
    """The dynamic host of a DGSSA config's backbone (every layer dynamic:
    upstream's DeiT/Swin), in eval mode.

    Args:
        cfg (Config): a config whose ``model.backbone`` is a DGSSA backbone.
        checkpoint (str, optional): the host's weights (any layout); None
            keeps a random init, with a warning.
    """
    bcfg = copy.deepcopy(cfg.model.backbone)
    kind = str(bcfg.get('type', '')).split('.')[-1]
    if kind not in HOSTS:
        raise ValueError(f'the config\'s backbone must be one of {HOSTS}, '
                         f'got {bcfg.get("type")!r}')
    bcfg['type'] = kind
    bcfg['static_init'] = 'uniform'
    if kind == 'DGSSAVisionTransformer':
        bcfg.update(static_layers=[], glad_layers=[], glad_tokens=[])
    else:
        bcfg.update(static_blocks=0)
    if checkpoint:
        bcfg['init_cfg'] = dict(type='Pretrained', checkpoint=checkpoint)
    else:
        warnings.warn('no --checkpoint: the statistics are those of a '
                      'randomly initialised host')
        bcfg['init_cfg'] = None
    backbone = MODELS.build(bcfg)
    backbone.init_weights()
    backbone.eval()  # mmpretrain backbones' train() returns None
    return backbone


def add_attention_hooks(backbone, singular_values=False):
    """Record every attention layer of a host backbone.

    Args:
        backbone (nn.Module): from :func:`build_host_backbone`.
        singular_values (bool): also record singular values.

    Returns:
        tuple[dict, list]: ``{name: AttentionStats}`` in layer order
        (``name + '.static_logits'`` is its DGSSA parameter), and the hooks.
    """
    stats, handles = {}, []
    if isinstance(backbone, DGSSAVisionTransformer):
        for i, layer in enumerate(backbone.layers):
            st = stats[f'layers.{i}.attn'] = AttentionStats(singular_values)
            handles.append(
                layer.attn.register_forward_hook(
                    lambda m, args, out, st=st: st.update(
                        vit_attention(m, args[0]))))
    elif isinstance(backbone, DGSSASwinTransformer):
        for i, stage in enumerate(backbone.stages):
            for j, block in enumerate(stage.blocks):
                st = stats[f'stages.{i}.blocks.{j}.attn.w_msa'] = \
                    AttentionStats(singular_values)

                def hook(m, args, kwargs, out, st=st):
                    mask = kwargs.get('mask', args[1] if len(args) > 1 else
                                      None)
                    st.update(interior_windows(
                        window_attention(m, args[0], mask), mask))

                handles.append(
                    block.attn.w_msa.register_forward_hook(
                        hook, with_kwargs=True))
    else:
        raise ValueError(f'not a DGSSA host: {type(backbone).__name__}')
    return stats, handles


def interior_windows(attn, mask):
    """The attention of the windows the shift mask leaves whole (all of
    them if none is).

    Args:
        attn (Tensor): ``(B * nW, h, N, N)``.
        mask (Tensor | None): upstream's additive ``(nW, N, N)``.

    Returns:
        Tensor: ``(S, h, N, N)``.
    """
    if mask is None:
        return attn
    whole = (mask == 0).flatten(1).all(1)  # (nW, )
    if not bool(whole.any()):
        return attn
    nW = mask.shape[0]
    attn = attn.view(-1, nW, *attn.shape[1:])[:, whole]
    return attn.flatten(0, 1)


def build_loader(cfg, split, batch_size):
    """The ``{split}_dataloader`` of the config, sequential, no workers."""
    init_default_scope(cfg.get('default_scope', 'mmpretrain'))
    key = f'{split}_dataloader'
    if cfg.get(key) is None:
        raise ValueError(f'the config has no {key}')
    loader_cfg = copy.deepcopy(cfg[key])
    loader_cfg.update(batch_size=batch_size, num_workers=0,
                      persistent_workers=False,
                      sampler=dict(type='DefaultSampler', shuffle=False))
    return Runner.build_dataloader(loader_cfg)


def build_preprocessor(cfg):
    """The model's data preprocessor (top-level in mmpretrain configs)."""
    dp = copy.deepcopy(cfg.model.get('data_preprocessor') or
                       cfg.get('data_preprocessor') or {})
    dp.setdefault('type', 'mmpretrain.ClsDataPreprocessor')
    dp.pop('batch_augments', None)
    return MODELS.build(dp)


@torch.no_grad()
def collect_attention(cfg, backbone, num_images, split='train',
                      batch_size=8, singular_values=False):
    """Gather attention statistics of ``backbone`` over ``num_images``
    images of the config's ``split`` (with its own pipeline).

    Args:
        cfg (Config): the config (its dataloader and data preprocessor).
        backbone (nn.Module): the host backbone.
        num_images (int): images to use (fewer if the split is smaller).
        split (str): ``'train'``, ``'val'`` or ``'test'``.
        batch_size (int): images per forward.
        singular_values (bool): also record singular values.

    Returns:
        tuple[dict, int]: ``{name: AttentionStats}`` and the images seen.
    """
    loader = build_loader(cfg, split, batch_size)
    preprocessor = build_preprocessor(cfg)
    stats, handles = add_attention_hooks(backbone, singular_values)
    total = min(num_images, len(loader.dataset))
    bar = ProgressBar(total)
    seen = 0
    try:
        for batch in loader:
            if seen >= total:
                break
            inputs = preprocessor(batch, False)['inputs']
            inputs = inputs[:total - seen]
            backbone(inputs)
            seen += inputs.shape[0]
            for _ in range(inputs.shape[0]):
                bar.update()
    finally:
        for h in handles:
            h.remove()
    print()
    return stats, seen


def dgssa_checkpoint(backbone, stats, meta=None):
    """The host's checkpoint with ``static_logits = log(mean attention)`` in
    every attention layer: ``{'state_dict': {'backbone.' + name: tensor},
    'meta': meta}``."""
    state = backbone.state_dict()
    for name, st in stats.items():
        state[f'{name}.static_logits'] = attention_to_logits(st.mean)
    return dict(
        state_dict={f'backbone.{k}': v.cpu()
                    for k, v in state.items()},
        meta=meta or {})
