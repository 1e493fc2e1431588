"""Features of ours that need a newer torch than the oldest we support
(torch 2.1, ``docs/get_started.md``) refuse by name on an older one."""
import torch

__all__ = ['DEPLOY_TORCH', 'require_torch', 'torch_release']

#: first torch of ONNX export (``torch.onnx.export(..., dynamo=True)``) and
#: of the deployment tools' ``torch.compile(fullgraph=True)`` of our models
DEPLOY_TORCH = (2, 5)


def torch_release(version=None):
    """``(major, minor)`` of a torch version string.

    Args:
        version (str, optional): default: the installed torch's.

    Returns:
        tuple[int, int]: e.g. ``(2, 1)`` for ``'2.1.2+cu121'``.
    """
    release = (version or torch.__version__).split('+')[0].split('.')[:2]
    return tuple(int(part) for part in release)


def require_torch(minimum, feature, version=None):
    """Refuse ``feature`` on a torch older than ``minimum``.

    Args:
        minimum (tuple[int, int]): the first torch release that has it.
        feature (str): what the user asked for, in words.
        version (str, optional): the torch version (default: installed).

    Raises:
        RuntimeError: naming the feature, the version needed and found.
    """
    found = version or torch.__version__
    if torch_release(found) < tuple(minimum):
        raise RuntimeError(
            f'{feature} needs torch >= {minimum[0]}.{minimum[1]}; this is '
            f'torch {found}. Everything else of mmvitaccel runs on torch '
            '>= 2.1.')
