"""tools/reparameterize.py: a trained hMHSA/cFFN checkpoint -> deploy form
with identical outputs; the converter tool reads hosts for HViT backbones."""
import importlib.util
import os.path as osp
import subprocess
import sys

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import MODELS, DefaultScope, init_default_scope
from mmengine.runner.checkpoint import load_checkpoint

import mmvitaccel  # noqa: F401
from mmvitaccel.ops import RepLinear

from .utils import REPO, TINY_MODELS


def _tool(name, path):
    spec = importlib.util.spec_from_file_location(name, osp.join(REPO, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _config(tmp_path, config, **extra):
    """A user config: ``config`` with the tiny model of the recipe tests."""
    cfg = Config.fromfile(osp.join(REPO, config))
    cfg.merge_from_dict({
        k: v
        for k, v in TINY_MODELS[config].items() if not k.startswith('tiny.')
    })
    cfg.merge_from_dict(extra)
    path = str(tmp_path / osp.basename(config))
    cfg.dump(path)
    return path


def _build(path, **options):
    cfg = Config.fromfile(path)
    cfg.merge_from_dict(options)
    init_default_scope('mmpretrain')
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(cfg.model)


@pytest.mark.parametrize('config', [
    'configs/hvit_pvtv2_b1_tinyimagenet.py', 'configs/hvit_deit_s_in1k.py',
    'configs/hvit_swin_t_in1k.py'
])
def test_reparameterize_tool_gives_identical_outputs(config, tmp_path):
    path = _config(tmp_path, config)
    torch.manual_seed(0)
    model = _build(path)
    model.init_weights()
    x = torch.randn(2, 3, 224, 224)
    model.train()  # as after training: BN statistics away from (0, 1)
    with torch.no_grad():
        for _ in range(2):
            model.extract_feat(x + torch.randn_like(x))
    trained = str(tmp_path / 'epoch_1.pth')
    torch.save(dict(state_dict=model.state_dict(), meta=dict(epoch=1)),
               trained)
    deploy = str(tmp_path / 'deploy.pth')
    diff = _tool('reparameterize', 'tools/reparameterize.py').main(
        [path, trained, deploy, '--check-shape', '1', '3', '224', '224'])
    assert diff < 1e-4

    folded = _build(path, **{'model.backbone.deploy': True})
    load_checkpoint(folded, deploy, map_location='cpu', strict=True)
    assert not any(isinstance(m, RepLinear) and not m.deploy
                   for m in folded.modules())
    model.eval()
    folded.eval()
    with torch.no_grad():
        ref = model(x, mode='tensor')
        out = folded(x, mode='tensor')
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    assert ref.argmax(-1).tolist() == out.argmax(-1).tolist()
    assert torch.load(deploy, weights_only=False)['meta']['deploy'] is True


def test_reparameterize_refuses_a_deploy_config(tmp_path):
    path = _config(tmp_path, 'configs/hvit_deit_s_in1k.py',
                   **{'model.backbone.deploy': True})
    with pytest.raises(ValueError, match='training form'):
        _tool('reparameterize', 'tools/reparameterize.py').main(
            [path, 'unused.pth', str(tmp_path / 'out.pth')])


def test_checkpoint_converter_reads_a_host_for_hvit(tmp_path):
    from mmpretrain.models import VisionTransformer
    path = _config(tmp_path, 'configs/hvit_deit_s_in1k.py')
    arch = dict(TINY_MODELS['configs/hvit_deit_s_in1k.py']
                ['model.backbone.arch'])
    arch.pop('_delete_')
    vit = VisionTransformer(arch=arch)
    src = str(tmp_path / 'deit.pth')
    torch.save(dict(state_dict={f'backbone.{k}': v
                                for k, v in vit.state_dict().items()}), src)
    out = subprocess.run(
        [sys.executable, 'tools/model_converters/convert_checkpoint.py',
         path, src, str(tmp_path / 'hvit.pth')],
        cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    # 2 layers: qkv split (nothing missing), the two M2 (weight, bias) unused
    assert 'missing: 0' in out.stdout and 'unused: 4' in out.stdout
    state = torch.load(tmp_path / 'hvit.pth')['state_dict']
    qkv = vit.state_dict()['layers.1.attn.qkv.weight']
    torch.testing.assert_close(state['backbone.layers.1.attn.v.weight'],
                               qkv[2 * 64:])
