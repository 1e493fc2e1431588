"""``type='mmvitaccel.X'`` resolves from every upstream toolbox's scope."""
import importlib

import pytest
import torch.nn as nn
from mmengine.registry import DefaultScope, init_default_scope

import mmvitaccel  # noqa: F401
from mmvitaccel import registry

SCOPES = ['mmpretrain', 'mmdet', 'mmseg', 'mmaction']


@pytest.fixture
def probe_model():
    """A module registered in our MODELS for the duration of one test."""

    class RegistryProbe(nn.Linear):

        def __init__(self, width=3):
            super().__init__(width, width)

    registry.MODELS.register_module(module=RegistryProbe)
    yield RegistryProbe
    registry.MODELS._module_dict.pop('RegistryProbe')


def test_children_of_mmengine_roots():
    from mmengine.registry import MODELS, RUNNERS
    assert registry.MODELS.scope == 'mmvitaccel'
    assert registry.MODELS.parent is MODELS
    assert registry.RUNNERS.parent is RUNNERS
    assert MODELS._children['mmvitaccel'] is registry.MODELS


@pytest.mark.parametrize('scope', SCOPES)
def test_model_resolves_from_scope(scope, probe_model):
    toolbox = importlib.import_module(f'{scope}.registry')
    init_default_scope(scope)
    try:
        model = toolbox.MODELS.build(
            dict(type='mmvitaccel.RegistryProbe', width=5))
    finally:
        DefaultScope._instance_dict.pop(scope, None)
    assert isinstance(model, probe_model)
    assert model.weight.shape == (5, 5)


@pytest.mark.parametrize('scope', SCOPES)
def test_runner_resolves_from_scope(scope):
    toolbox = importlib.import_module(f'{scope}.registry')
    assert toolbox.RUNNERS.get('mmvitaccel.TinyRunner') is \
        mmvitaccel.tiny.TinyRunner


def test_upstream_names_fall_back_from_our_scope():
    # inside our scope, mmengine's components stay reachable
    assert registry.OPTIM_WRAPPERS.get('OptimWrapper') is not None
    assert registry.MODELS.get('mmdet.SwinTransformer') is not None
