"""Components that need an optional toolbox (mmdet, mmseg, mmaction2)
register only where it imports; elsewhere a stand-in retries the import
when built, then names the toolbox, how to install it and the cause."""
import importlib
import importlib.util
import os.path as osp
import sys

#: the mmaction package that the 1.2.0 wheel lacks
DRN_PACKAGE = 'mmaction.models.localizers.drn'


def mmaction_drn_missing():
    """Whether mmaction is installed without ``models/localizers/drn``
    (told without importing mmaction)."""
    spec = importlib.util.find_spec('mmaction')
    if spec is None or spec.origin is None:
        return False
    pkg_dir = osp.dirname(spec.origin)
    return not osp.isdir(osp.join(pkg_dir, 'models', 'localizers', 'drn'))


def drn_shim_needed():
    """Whether mmaction lacks DRN and the placeholders are not in place
    (``import mmaction.models`` would fail); does not import mmaction."""
    return mmaction_drn_missing() and DRN_PACKAGE not in sys.modules


MMCV_OPS_FIX = (
    'mmvitaccel needs mmcv 2.x built with its compiled ops (mmcv._ext), which '
    'mmdet, mmseg and mmaction2 import. Either run tools/setup_env.sh from the '
    'mmvitaccel repository (it builds mmcv 2.1.0 with ops for the pinned torch '
    'into .venv), or build it into your environment with '
    '`MMCV_WITH_OPS=1 pip install --no-build-isolation --no-binary mmcv mmcv==2.1.0` '
    '(torch >= 2.6 headers need -std=c++20 in mmcv\'s setup.py). Cause: {cause}')

__all__ = [
    'DRN_PACKAGE', 'MMCV_OPS_FIX', 'TOOLBOXES', 'ToolboxMissing',
    'drn_shim_needed', 'import_optional', 'mmaction_drn_missing',
    'missing_components', 'retry_missing', 'toolbox_error'
]

#: import name -> the pip requirement that installs it (our pinned version)
TOOLBOXES = {
    'mmdet': 'mmdet==3.3.0',
    'mmseg': 'mmsegmentation==1.2.2',
    'mmaction': 'mmaction2==1.2.0',
}

#: extra of ours that installs each toolbox
EXTRAS = {'mmdet': 'mmdet', 'mmseg': 'mmseg', 'mmaction': 'mmaction'}

#: component name -> its stand-in, for the components skipped so far
_MISSING = {}
#: component name -> its real class, for those imported on a retry
_RESOLVED = {}


class ToolboxMissing(ImportError):
    """A component of ours was asked for whose toolbox does not import."""


def _message(name, toolbox, cause):
    text = (f'mmvitaccel.{name} needs {toolbox}, which could not be '
            f'imported ({type(cause).__name__}: {cause}). Install it with '
            f"`pip install 'mmvitaccel[{EXTRAS[toolbox]}]'` (or "
            f'`pip install {TOOLBOXES[toolbox]}`).')
    if 'mmcv._ext' in str(cause):
        text += ' ' + MMCV_OPS_FIX.format(cause=cause)
    elif toolbox == 'mmaction' and 'drn' in str(cause):
        text += (' The mmaction2 1.2.0 wheel lacks models/localizers/drn: '
                 'call mmvitaccel.compat.apply() (or '
                 'mmvitaccel.compat.patch_mmaction_drn()) before importing '
                 'mmaction, as our tools do.')
    return text


def _stand_in(name, module, toolboxes, registries, cause):
    """A class registered as ``name`` while ``module`` cannot be imported.

    Args:
        name (str): the component's registered name.
        module (str): our module that defines it.
        toolboxes (tuple[str]): the toolboxes it needs, the failing first.
        registries (list[Registry]): where ``name`` is registered.
        cause (BaseException): why the toolbox does not import.
    """

    def __new__(cls, *args, **kwargs):
        real = _retry(name)
        if real is None:
            raise ToolboxMissing(_message(name, cls._toolbox, cls._cause))
        return real(*args, **kwargs)

    return type(name, (), dict(
        __new__=__new__, __module__=module, _cause=cause, _module=module,
        _toolbox=toolboxes[0], _toolboxes=tuple(toolboxes),
        _registries=registries,
        __doc__=f'Stand-in: {_message(name, toolboxes[0], cause)}'))


def _register(stand_ins):
    """Put ``{name: stand_in}`` (back) into their registries."""
    for name, stand_in in stand_ins.items():
        for registry in stand_in._registries:
            registry.register_module(name=name, module=stand_in, force=True)


def _retry(name):
    """Import a skipped component's module again if its toolboxes now
    import; an import error of our own module is raised as it is.

    Args:
        name (str): the component's registered name.

    Returns:
        type | None: the real class, or None while a toolbox still fails.
    """
    if name in _RESOLVED:  # a stand-in kept from before the fix
        return _RESOLVED[name]
    stand_in = _MISSING.get(name)
    if stand_in is None:
        return None
    for toolbox in stand_in._toolboxes:
        error = toolbox_error(toolbox)
        if error is not None:
            stand_in._toolbox, stand_in._cause = toolbox, error
            return None
    module = stand_in._module
    siblings = {n: s for n, s in _MISSING.items() if s._module == module}
    for sibling, sibling_stand_in in siblings.items():
        for registry in sibling_stand_in._registries:  # the module's names
            if registry._module_dict.get(sibling) is sibling_stand_in:
                del registry._module_dict[sibling]
    try:
        real = importlib.import_module(module)
    except BaseException:
        _register(siblings)
        raise
    found = {}
    for sibling, sibling_stand_in in siblings.items():
        del _MISSING[sibling]
        _RESOLVED[sibling] = found[id(sibling_stand_in)] = getattr(
            real, sibling)
    for loaded in list(sys.modules.values()):  # our namespaces, re-exports
        if getattr(loaded, '__name__', '').split('.')[0] != 'mmvitaccel':
            continue
        for key, value in list(vars(loaded).items()):
            if id(value) in found:
                setattr(loaded, key, found[id(value)])
    return _RESOLVED[name]


def toolbox_error(toolbox):
    """Why ``toolbox``'s models cannot be imported, or None (mmaction's
    missing DRN is told without importing it).

    Args:
        toolbox (str): a key of :data:`TOOLBOXES`.

    Returns:
        Exception | None: what ``import <toolbox>.models`` raised.
    """
    if toolbox not in TOOLBOXES:
        raise ValueError(f'toolbox must be one of {sorted(TOOLBOXES)}, '
                         f'got {toolbox!r}')
    try:
        if importlib.util.find_spec(toolbox) is None:
            raise ModuleNotFoundError(f'No module named {toolbox!r}')
        if toolbox == 'mmaction':
            if drn_shim_needed():
                raise ImportError(
                    "No module named 'mmaction.models.localizers.drn'")
        importlib.import_module(f'{toolbox}.models')
    except Exception as e:  # noqa: B902 (a broken toolbox is a missing one)
        return e
    return None


def import_optional(module, toolboxes, names, registries, namespace=None,
                    exported=()):
    """Import one of our modules that needs ``toolboxes``, or register
    stand-ins (only for a failing toolbox).

    Args:
        module (str): our module, e.g.
            ``'mmvitaccel.models.stvit.stvit_swin3d'``.
        toolboxes (tuple[str]): keys of :data:`TOOLBOXES` it needs.
        names (list[str]): the names ``module`` registers, and exports.
        registries (list[Registry]): the registries ``names`` go to.
        namespace (dict, optional): a package's ``globals()``, where each
            name is bound to the real class or its stand-in.
        exported (list[str]): names exported without being registered.

    Returns:
        bool: whether the real module was imported.
    """
    failed = [(t, e) for t in toolboxes
              for e in [toolbox_error(t)] if e is not None]
    if failed:
        toolbox, error = failed[0]
        order = (toolbox, ) + tuple(t for t in toolboxes if t != toolbox)
        for name in list(names) + list(exported):
            registered = registries if name in names else []
            stand_in = _stand_in(name, module, order, registered, error)
            _MISSING[name] = stand_in
            _register({name: stand_in})
            if namespace is not None:
                namespace[name] = stand_in
        return False
    real = importlib.import_module(module)  # our own error: raised as is
    if namespace is not None:
        namespace.update({name: getattr(real, name)
                          for name in list(names) + list(exported)})
    return True


def missing_components():
    """The components skipped so far, with their toolbox.

    Returns:
        dict[str, str]: name -> toolbox.
    """
    return {name: s._toolbox for name, s in _MISSING.items()}


def retry_missing():
    """Retry every skipped component's import (after an environment fix);
    the registries and our namespaces get the real classes.

    Returns:
        list[str]: the names that now import.
    """
    done = []
    for name in list(_MISSING):
        if name not in _MISSING:
            continue  # a sibling's retry imported it
        module = _MISSING[name]._module
        siblings = [n for n, s in _MISSING.items() if s._module == module]
        if _retry(name) is not None:
            done += siblings
    return done
