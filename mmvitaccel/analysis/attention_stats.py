"""Attention statistics of a pretrained host model over a dataset: what
``tools/dgssa_init.py`` and ``tools/glad_search.py`` share.

The host is the dynamic model that a DGSSA config compresses: the config's
``DGSSAVisionTransformer``/``DGSSASwinTransformer`` backbone with no static
layer and no GLAD, which is exactly upstream's DeiT/Swin (tested), loaded
from any checkpoint layout the backbone reads. Forward hooks record each
attention layer's probabilities (per head; for Swin per window, relative
position bias and shift mask included; in shifted blocks only the windows
the mask leaves whole, see :func:`interior_windows`) into
:class:`mmvitaccel.ops.AttentionStats`.
"""
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
    """The dynamic host of a DGSSA config's backbone, in eval mode.

    Args:
        cfg (Config): a config whose ``model.backbone`` is a DGSSA backbone.
        checkpoint (str, optional): pretrained weights of the host (DeiT or
            Swin, any supported layout); None keeps a random init (a
            warning says so).

    Returns:
        nn.Module: the backbone with every layer dynamic.
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
        tuple[dict, list]: ``{name: AttentionStats}`` in layer order, where
        ``name + '.static_logits'`` is the DGSSA parameter of that layer,
        and the hook handles.
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
    """The attention of the windows that the shift mask leaves whole.

    In a shifted block the windows on the bottom and right edges mix
    regions of the rolled map, and their attention is cut by the mask. The
    static matrix gets the mask again at run time (``softmax(S + mask)``
    renormalises what it allows), so its init is the mean over the whole
    windows only, and the difference metric then measures how attention
    varies across images, not across mask patterns. If no window is whole
    (a map of a single window), all windows are used.

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
    """The model's data preprocessor (mmpretrain configs keep it at the
    top level)."""
    dp = copy.deepcopy(cfg.model.get('data_preprocessor') or
                       cfg.get('data_preprocessor') or {})
    dp.setdefault('type', 'mmpretrain.ClsDataPreprocessor')
    dp.pop('batch_augments', None)
    return MODELS.build(dp)


@torch.no_grad()
def collect_attention(cfg, backbone, num_images, split='train',
                      batch_size=8, singular_values=False):
    """Run ``backbone`` over ``num_images`` images of the config's
    ``split`` and gather attention statistics, with a progress bar.

    Args:
        cfg (Config): the config (its dataloader and data preprocessor).
        backbone (nn.Module): the host backbone.
        num_images (int): images to use (fewer if the split is smaller).
        split (str): ``'train'``, ``'val'`` or ``'test'``; the split's own
            pipeline is used.
        batch_size (int): images per forward.
        singular_values (bool): also record singular values.

    Returns:
        tuple[dict, int]: ``{name: AttentionStats}`` and the number of
        images seen.
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
    """A checkpoint of the host with the dynamic-guided static logits
    ``log(mean attention)`` of every attention layer.

    Returns:
        dict: ``{'state_dict': {'backbone.' + name: tensor}, 'meta': ...}``.
    """
    state = backbone.state_dict()
    for name, st in stats.items():
        state[f'{name}.static_logits'] = attention_to_logits(st.mean)
    return dict(
        state_dict={f'backbone.{k}': v.cpu()
                    for k, v in state.items()},
        meta=meta or {})
