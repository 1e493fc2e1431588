# Copyright (c) mmvitaccel contributors. All rights reserved.
"""OpenMMLab models and their inputs from configs, for the analysis tools
(``benchmark.py``, ``get_flops.py``, ``visualize_tokens.py``)."""
import copy
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

__all__ = [
    'TOOLBOXES', 'DEFAULT_SHAPES', 'build_model', 'load_config', 'toolbox_of',
    'backbone_input', 'dummy_data_batch', 'real_data_batches',
    'tensor_mode_kwargs', 'parse_shape'
]

#: Toolboxes the tools know, by the top-level package of the model class.
TOOLBOXES = ('mmpretrain', 'mmdet', 'mmseg', 'mmaction')

#: Default input per toolbox: ``(H, W)``, or ``(T, H, W)`` for video.
DEFAULT_SHAPES = {
    'mmpretrain': (224, 224),
    'mmdet': (800, 1333),
    'mmseg': (512, 512),
    'mmaction': (32, 224, 224),
}


def load_config(config: str,
                cfg_options: Optional[dict] = None,
                tiny: bool = False):
    """Load a config file (``toolbox::`` paths allowed).

    Args:
        config (str): Path of the config, or ``toolbox::relative/path.py``.
        cfg_options (dict, optional): Overrides merged into the config.
        tiny (bool): Apply the tiny overlay after the overrides.

    Returns:
        mmengine.Config: The config.
    """
    from mmvitaccel.apis.launch import load_config_file
    cfg = load_config_file(config, cfg_options)
    if tiny:
        from mmvitaccel.tiny import tinyfy_config
        cfg = tinyfy_config(cfg)
    return cfg


def build_model(cfg,
                checkpoint: Optional[str] = None,
                device: str = 'cpu') -> nn.Module:
    """Build ``cfg.model`` as the Runner does (default scope, top-level
    ``data_preprocessor``), SyncBN reverted to BN, without ``init_weights``
    (no download), in eval mode.

    Args:
        cfg (mmengine.Config): The config.
        checkpoint (str, optional): A checkpoint to load. Defaults to None.
        device (str): Device to put the model on. Defaults to ``'cpu'``.
    """
    import mmvitaccel  # registers components
    mmvitaccel.compat.apply()  # the harness is our tools'
    from mmengine.model import revert_sync_batchnorm
    from mmengine.registry import MODELS, DefaultScope, init_default_scope
    scope = cfg.get('default_scope')
    if scope is not None:
        init_default_scope(scope)
    # copies: builders fill in arguments in place, and the caller's config
    # (its text is a cache key) must stay as it was
    model_cfg = copy.deepcopy(cfg.model)
    # as mmengine's Runner: a top-level data_preprocessor completes the model's
    if cfg.get('data_preprocessor') is not None:
        model_cfg.setdefault('data_preprocessor',
                             copy.deepcopy(cfg.data_preprocessor))
    with DefaultScope.overwrite_default_scope(scope):
        model = MODELS.build(model_cfg)
    model = revert_sync_batchnorm(model)
    if checkpoint is not None:
        from mmengine.runner import load_checkpoint
        load_checkpoint(model, checkpoint, map_location='cpu')
    return model.to(device).eval()


def toolbox_of(model: nn.Module, cfg=None) -> str:
    """The toolbox (of :data:`TOOLBOXES`) of a model's class or bases, else
    of the config's ``default_scope``.

    Args:
        model (nn.Module): The model.
        cfg (mmengine.Config, optional): Its config.
    """
    for klass in type(model).__mro__:
        root = klass.__module__.split('.')[0]
        if root in TOOLBOXES:
            return root
    scope = cfg.get('default_scope') if cfg is not None else None
    if scope in TOOLBOXES:
        return scope
    raise ValueError(f'cannot tell the toolbox of {type(model).__name__}; '
                     f'expected a model of one of {TOOLBOXES}')


def backbone_input(toolbox: str,
                   shape: Sequence[int],
                   batch_size: int = 1) -> torch.Tensor:
    """A random backbone input ``(B, 3, H, W)``, or ``(B, 3, T, H, W)``.

    Args:
        toolbox (str): One of :data:`TOOLBOXES`.
        shape (Sequence[int]): ``(H, W)`` or, for video, ``(T, H, W)``.
        batch_size (int): ``B``. Defaults to 1.
    """
    return torch.randn(batch_size, 3, *shape)


def dummy_data_batch(toolbox: str,
                     shape: Sequence[int],
                     batch_size: int = 1) -> dict:
    """A raw data batch (before the data preprocessor) with random pixels
    and the meta information the toolbox's ``predict``/``tensor`` modes read.

    Args:
        toolbox (str): One of :data:`TOOLBOXES`.
        shape (Sequence[int]): ``(H, W)``; ``(T, H, W)`` for mmaction.
        batch_size (int): Number of samples. Defaults to 1.

    Returns:
        dict: ``{'inputs': list[Tensor], 'data_samples': list}``.
    """
    if toolbox == 'mmaction':
        from mmaction.structures import ActionDataSample
        inputs = [
            torch.randint(0, 256, (1, 3, *shape), dtype=torch.uint8)
            for _ in range(batch_size)
        ]
        samples = [ActionDataSample() for _ in range(batch_size)]
        return dict(inputs=inputs, data_samples=samples)
    h, w = shape
    inputs = [
        torch.randint(0, 256, (3, h, w), dtype=torch.uint8)
        for _ in range(batch_size)
    ]
    if toolbox == 'mmpretrain':
        from mmpretrain.structures import DataSample
        samples = [DataSample() for _ in range(batch_size)]
    elif toolbox == 'mmdet':
        from mmdet.structures import DetDataSample
        samples = [
            DetDataSample(metainfo=dict(img_id=i,
                                        img_shape=(h, w),
                                        ori_shape=(h, w),
                                        scale_factor=(1.0, 1.0)))
            for i in range(batch_size)
        ]
    elif toolbox == 'mmseg':
        from mmseg.structures import SegDataSample
        samples = [
            SegDataSample(metainfo=dict(img_shape=(h, w), ori_shape=(h, w)))
            for _ in range(batch_size)
        ]
    else:
        raise ValueError(f'unknown toolbox {toolbox!r}')
    return dict(inputs=inputs, data_samples=samples)


def real_data_batches(cfg,
                      num_images: int,
                      batch_size: int = 1,
                      progress: bool = False) -> List[dict]:
    """The first ``num_images`` samples of the config's test dataloader, as
    raw batches of ``batch_size`` (the last one may be smaller).

    Args:
        cfg (mmengine.Config): The config.
        num_images (int): Number of samples to take.
        batch_size (int): Samples per batch. Defaults to 1.
        progress (bool): Show a tqdm bar. Defaults to False.
    """
    from mmengine.registry import DefaultScope
    from mmengine.runner import Runner
    loader_cfg = copy.deepcopy(cfg.test_dataloader)
    loader_cfg['batch_size'] = batch_size
    loader_cfg['num_workers'] = 0
    loader_cfg['persistent_workers'] = False
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope')):
        loader = Runner.build_dataloader(loader_cfg)
    batches, seen = [], 0
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=num_images, desc='loading images', unit='img')
    for batch in loader:
        n = min(len(batch['inputs']), num_images - seen)
        batch = {k: v[:n] for k, v in batch.items()}
        batches.append(batch)
        seen += n
        if bar is not None:
            bar.update(n)
        if seen >= num_images:
            break
    if bar is not None:
        bar.close()
    if seen < num_images:
        raise ValueError(f'the test dataloader has only {seen} samples, '
                         f'{num_images} were asked for')
    return batches


def tensor_mode_kwargs(toolbox: str) -> dict:
    """``model.forward`` keyword arguments that run the whole network
    without post-processing (with ``stage='head'`` for mmaction).

    Args:
        toolbox (str): One of :data:`TOOLBOXES`.
    """
    kwargs = dict(mode='tensor')
    if toolbox == 'mmaction':
        kwargs['stage'] = 'head'
    return kwargs


def parse_shape(shape: Optional[Sequence[int]],
                toolbox: str) -> Tuple[int, ...]:
    """The input shape from ``--shape`` values or the toolbox default.

    Args:
        shape (Sequence[int], optional): ``S``, ``H W`` or ``T H W``; None
            for :data:`DEFAULT_SHAPES`.
        toolbox (str): One of :data:`TOOLBOXES`.

    Returns:
        tuple[int, ...]: ``(H, W)`` or ``(T, H, W)``.
    """
    if not shape:
        return tuple(DEFAULT_SHAPES[toolbox])
    shape = tuple(int(s) for s in shape)
    if toolbox == 'mmaction':
        if len(shape) == 1:
            shape = (DEFAULT_SHAPES['mmaction'][0], ) + shape * 2
        elif len(shape) == 2:
            shape = (DEFAULT_SHAPES['mmaction'][0], ) + shape
        if len(shape) != 3:
            raise ValueError(f'--shape for video is T H W, got {shape}')
        return shape
    if len(shape) == 1:
        shape = shape * 2
    if len(shape) != 2:
        raise ValueError(f'--shape for images is H W, got {shape}')
    return shape
