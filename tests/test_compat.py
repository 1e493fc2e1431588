"""The stack fixes in mmvitaccel.compat."""
import io
import pickle
import subprocess
import sys

import pytest
import torch

import mmvitaccel  # noqa: F401
from mmvitaccel import compat


def test_mmaction_models_import():
    # the 1.2.0 wheel lacks localizers/drn; our shim makes this work
    import mmaction.models  # noqa: F401
    from mmaction.registry import MODELS
    assert MODELS.get('Recognizer3D') is not None


@pytest.mark.skipif(not compat.mmaction_drn_missing(),
                    reason='mmaction ships DRN here; nothing to shim')
def test_drn_placeholder_explains_itself():
    from mmaction.models.localizers import DRN
    with pytest.raises(ImportError, match='not included in the mmaction2'):
        DRN()


@pytest.mark.slow
def test_mmaction_fails_without_shim():
    """Without the shim, the bare wheel cannot import mmaction.models."""
    if not compat.mmaction_drn_missing():
        pytest.skip('mmaction ships DRN here')
    code = 'import mmaction.models'
    proc = subprocess.run([sys.executable, '-c', code],
                          capture_output=True,
                          text=True)
    assert proc.returncode != 0
    assert 'drn' in proc.stderr


#: the allow-list is torch's from 2.6 on (weights_only by default)
needs_allow_list = pytest.mark.skipif(
    not compat.renamed_safe_globals_supported(),
    reason='torch < 2.6 loads with weights_only=False by default and cannot '
    'allow-list the message hub (load_checkpoint_safely covers it there)')


def _runner_like_checkpoint():
    """What mmengine's runner saves besides tensors."""
    import numpy as np
    from mmengine.logging import HistoryBuffer, MessageHub
    hub = MessageHub.get_instance('compat_test')
    hub.update_scalar('train/loss', 1.5)
    hub.update_scalar('train/lr', np.float64(0.1))
    hub.update_info('epoch', 3)
    assert isinstance(hub.log_scalars['train/loss'], HistoryBuffer)
    return dict(
        meta=dict(epoch=3, iter=30, seed=np.int64(7),
                  dataset_meta=dict(classes=('a', 'b'))),
        state_dict=dict(w=torch.ones(2)),
        message_hub=hub.state_dict())


@needs_allow_list
def test_mmengine_checkpoint_loads_with_weights_only():
    buf = io.BytesIO()
    torch.save(_runner_like_checkpoint(), buf)
    buf.seek(0)
    ckpt = torch.load(buf, weights_only=True)
    assert ckpt['meta']['epoch'] == 3
    assert ckpt['message_hub']['log_scalars']['train/loss'].current() == 1.5


@needs_allow_list
def test_allow_list_is_needed():
    buf = io.BytesIO()
    torch.save(_runner_like_checkpoint(), buf)
    saved = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    try:
        buf.seek(0)
        with pytest.raises(pickle.UnpicklingError):
            torch.load(buf, weights_only=True)
    finally:
        torch.serialization.add_safe_globals(saved)


@needs_allow_list
def test_numpy1_checkpoints_load():
    """A numpy array pickled under numpy 1.x names ``numpy.core``."""
    import numpy as np
    buf = io.BytesIO()
    # the legacy format keeps the pickle as is, so names can be rewritten
    torch.save(dict(a=np.arange(3.)), buf, _use_new_zipfile_serialization=False)
    data = buf.getvalue().replace(b'numpy._core.multiarray',
                                  b'numpy.core.multiarray')
    assert b'numpy.core.multiarray' in data and b'numpy._core' not in data
    loaded = torch.load(io.BytesIO(data), weights_only=True)
    assert loaded['a'].tolist() == [0., 1., 2.]


class Arbitrary:
    """Not on any allow-list."""


@needs_allow_list
def test_arbitrary_pickles_still_refused(monkeypatch):
    buf = io.BytesIO()
    torch.save(dict(obj=Arbitrary()), buf)
    buf.seek(0)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(buf)  # torch's default is weights_only=True
    # the user's explicit opt-in, torch's own switch
    monkeypatch.setenv('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD', '1')
    buf.seek(0)
    assert isinstance(torch.load(buf)['obj'], Arbitrary)


@needs_allow_list
def test_getattr_is_restricted_to_history_buffer():
    """A pickle that uses getattr as a gadget is refused."""
    import numpy as np

    class Gadget:

        def __reduce__(self):
            return getattr, (np.ndarray, 'tofile')

    buf = io.BytesIO()
    torch.save(dict(g=Gadget()), buf)
    buf.seek(0)
    with pytest.raises(pickle.UnpicklingError, match='refuses getattr'):
        torch.load(buf)


@pytest.mark.parametrize('name', sorted(compat.CHECKPOINTING_UPSTREAM))
def test_upstream_checkpointing_names_use_reentrant(name):
    """Every installed upstream host module calls the explicit checkpoint,
    and a checkpointed upstream block runs without torch's warning that
    ``use_reentrant`` must be passed (an error in a later torch)."""
    import importlib
    import warnings
    module = importlib.import_module(name)
    assert getattr(module, compat.CHECKPOINTING_UPSTREAM[name]) is \
        compat.EXPLICIT_CHECKPOINT
    if name != 'mmdet.models.backbones.swin':
        return
    block = module.SwinBlock(embed_dims=8, num_heads=2,
                             feedforward_channels=16, window_size=2,
                             with_cp=True)
    x = torch.randn(1, 16, 8, requires_grad=True)
    with warnings.catch_warnings():
        warnings.filterwarnings('error', message='.*use_reentrant.*')
        block(x, (4, 4)).sum().backward()
    assert block.attn.w_msa.qkv.weight.grad is not None


def test_load_checkpoint_safely_on_every_torch(tmp_path):
    """A runner checkpoint (message hub, numpy) loads; a pickle that would
    run code is refused, before it runs, on the old torch too."""
    import numpy as np
    path = str(tmp_path / 'runner.pth')
    torch.save(_runner_like_checkpoint(), path)
    ckpt = compat.load_checkpoint_safely(path)
    assert ckpt['meta']['epoch'] == 3 and ckpt['meta']['seed'] == 7
    assert ckpt['message_hub']['log_scalars']['train/loss'].current() == 1.5

    class Gadget:

        def __reduce__(self):
            return getattr, (np.ndarray, 'tofile')

    torch.save(dict(g=Gadget(), other=Arbitrary()), path)
    with pytest.raises(pickle.UnpicklingError):
        compat.load_checkpoint_safely(path)
