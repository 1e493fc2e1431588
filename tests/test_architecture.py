"""The layers of ``docs/architecture.md`` hold: no module of the package
imports a layer above its own.

Every ``import`` statement in ``mmvitaccel/**/*.py`` is read with :mod:`ast`,
function-level ones included, relative imports resolved against the file's
package, and checked against :data:`MAY_IMPORT`, the table of the document.
Two fresh interpreters then check what an import really loads.
"""
import ast
import glob
import json
import os.path as osp
import subprocess
import sys
import textwrap

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
PACKAGE = 'mmvitaccel'

#: ``import mmvitaccel`` itself, which imports compat, engine, models and
#: toolboxes so that every component a config can name is registered.
ROOT = '<root>'

#: Packages ``ops`` may not import (it is plain torch).
OPENMMLAB = ('mmengine', 'mmcv', 'mmpretrain', 'mmdet', 'mmseg', 'mmaction')

#: Layer -> the other layers of the package it may import. ``registry.py``,
#: ``compat.py``, ``toolboxes.py`` and ``version.py`` are one row of the
#: document's table.
_BASE = {'registry', 'compat', 'toolboxes', 'version'}
MAY_IMPORT = {
    'ops': set(),
    **{name: _BASE - {name} for name in _BASE},
    'models': {'ops'} | _BASE,
    'engine': {'models', 'ops', 'registry'},
    'tiny': {'registry'},
    'switch': {'models', 'ops'} | _BASE,
    'apis': {'switch', 'tiny', 'engine', 'models', 'ops', ROOT} | _BASE,
    'analysis': {'apis', 'switch', 'tiny', 'engine', 'models', 'ops',
                 ROOT} | _BASE,
    ROOT: {'compat', 'engine', 'models', 'toolboxes', 'version'},
}

#: Inside ``models``: each method's subpackage may import the shared ones
#: (``utils``, ``distill``), never another method's; ``distill`` only
#: ``utils``, and ``utils`` none of them.
METHODS = ('stvit', 'token_pruning', 'dgssa', 'hvit', 'tome')
MODELS_MAY_IMPORT = {
    **{method: {'utils', 'distill'} for method in METHODS},
    'distill': {'utils'},
    'utils': set(),
}

#: Layers above ``models``, which ``import mmvitaccel.models`` must not load.
ABOVE_MODELS = ('engine', 'tiny', 'switch', 'apis', 'analysis')


def module_name(path, package_dir, package):
    """The dotted name of a source file of the package.

    Args:
        path (str): A ``.py`` file under ``package_dir``.
        package_dir (str): The package's folder.
        package (str): The package's name.

    Returns:
        str: e.g. ``'mmvitaccel.models'`` for
        ``mmvitaccel/models/backbones/__init__.py``.
    """
    rel = osp.splitext(osp.relpath(path, package_dir))[0].split(osp.sep)
    if rel[-1] == '__init__':
        rel = rel[:-1]
    return '.'.join([package] + rel)


def imported_modules(path, module):
    """Every module a file imports, function-level imports included.

    ``from a import b`` gives ``a.b`` (``b`` may be a submodule); relative
    imports are resolved against the file's package.

    Args:
        path (str): The source file.
        module (str): Its dotted name (see :func:`module_name`).

    Returns:
        list[tuple[int, str]]: ``(line, absolute dotted name)`` pairs.
    """
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read(), path)
    is_package = osp.basename(path) == '__init__.py'
    package = module.split('.') if is_package else module.split('.')[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if node.level > len(package):
                    raise ValueError(f'{path}:{node.lineno}: relative import '
                                     'beyond the top-level package')
                base = package[:len(package) - node.level + 1]
                target = '.'.join(base + ([node.module] if node.module else
                                          []))
            else:
                target = node.module
            found += [(node.lineno, f'{target}.{alias.name}')
                      for alias in node.names]
    return found


def layer_of(module, package, layers):
    """The layer of a dotted name inside the package.

    Args:
        module (str): e.g. ``'mmvitaccel.models.stvit.stvit_deit'``.
        package (str): The package's name.
        layers (set[str]): The package's top-level modules and subpackages.

    Returns:
        str: The top-level module or subpackage under ``package``, or
        :data:`ROOT` for the package itself and the names its
        ``__init__.py`` defines.
    """
    parts = module.split('.')
    if len(parts) > 1 and parts[1] in layers:
        return parts[1]
    return ROOT


def upward_imports(package_dir, package=PACKAGE, may_import=None):
    """Every import that breaks the layer table, as ``file:line: why``.

    Args:
        package_dir (str): The package's folder.
        package (str): The package's name.
        may_import (dict[str, set[str]], optional): Layer -> the other
            layers it may import. Defaults to :data:`MAY_IMPORT`.

    Returns:
        list[str]: One line per violating import, with its file (relative to
        the package's parent folder) and line number.
    """
    may_import = MAY_IMPORT if may_import is None else may_import
    layers = {
        osp.splitext(osp.basename(p.rstrip(osp.sep)))[0]
        for p in glob.glob(osp.join(package_dir, '*'))
        if p.endswith('.py') or osp.isfile(osp.join(p, '__init__.py'))
    } - {'__init__'}
    parent = osp.dirname(osp.abspath(package_dir))
    found = []
    paths = glob.glob(osp.join(package_dir, '**', '*.py'), recursive=True)
    for path in sorted(paths):
        where = osp.relpath(path, parent)
        module = module_name(path, package_dir, package)
        layer = layer_of(module, package, layers)
        if layer not in may_import:
            found.append(f'{where}:1: layer {layer!r} is not in the table '
                         'of docs/architecture.md')
            continue
        allowed = may_import[layer] | {layer}
        for line, target in imported_modules(path, module):
            top = target.split('.')[0]
            if top == 'tools':
                found.append(f'{where}:{line}: imports {target}; nothing in '
                             'the package imports tools/')
            elif top in OPENMMLAB and layer == 'ops':
                found.append(f'{where}:{line}: ops imports {target}; ops '
                             'imports no OpenMMLab package')
            elif top == package:
                target_layer = layer_of(target, package, layers)
                if target_layer not in allowed:
                    may = ', '.join(sorted(may_import[layer])) or 'nothing'
                    found.append(f'{where}:{line}: {layer} imports {target} '
                                 f'({target_layer}); {layer} may import '
                                 f'{may}')
    return found


def test_no_upward_imports():
    found = upward_imports(osp.join(REPO, PACKAGE))
    for line in found:
        print(line)
    assert not found, 'imports against docs/architecture.md:\n' + '\n'.join(
        found)


def _package_modules(package_dir, package=PACKAGE):
    """Args: package_dir (str), package (str). Returns: dict[str, str]:
    dotted name -> file of every module of the package."""
    paths = glob.glob(osp.join(package_dir, '**', '*.py'), recursive=True)
    return {module_name(p, package_dir, package): p for p in sorted(paths)}


def _resolve(target, modules):
    """The module an imported name lives in: ``a.b.name`` -> ``a.b``.

    Args:
        target (str): A dotted name from :func:`imported_modules`.
        modules (dict[str, str]): The package's modules.

    Returns:
        str | None: The longest prefix of ``target`` that is a module.
    """
    parts = target.split('.')
    while parts:
        name = '.'.join(parts)
        if name in modules:
            return name
        parts.pop()
    return None


def method_imports(package_dir, package=PACKAGE):
    """Imports inside ``models`` that break :data:`MODELS_MAY_IMPORT`.

    Args:
        package_dir (str): The package's folder.
        package (str): The package's name.

    Returns:
        list[str]: ``file:line: why`` per violating import.
    """
    found = []
    prefix = f'{package}.models.'
    for module, path in _package_modules(package_dir, package).items():
        parts = module.split('.')
        if not module.startswith(prefix) or len(parts) < 3:
            continue
        own = parts[2]
        for line, target in imported_modules(path, module):
            if not target.startswith(prefix):
                continue
            other = target.split('.')[2]
            if other in MODELS_MAY_IMPORT and other != own and \
                    other not in MODELS_MAY_IMPORT.get(own, set()):
                found.append(f'{osp.relpath(path, osp.dirname(package_dir))}'
                             f':{line}: models.{own} imports {target}')
    return found


def import_cycles(package_dir, package=PACKAGE):
    """The import circles between the package's modules.

    Every import statement counts, function-level ones included; an
    imported name counts as an import of the module it lives in. The
    implicit imports of parent packages do not count.

    Args:
        package_dir (str): The package's folder.
        package (str): The package's name.

    Returns:
        list[list[str]]: Each circle as its modules, sorted; none if the
        import graph is acyclic.
    """
    modules = _package_modules(package_dir, package)
    graph = {}
    for module, path in modules.items():
        graph[module] = {
            t for t in (_resolve(target, modules)
                        for _, target in imported_modules(path, module))
            if t is not None and t != module}
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node):  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_methods_import_only_the_shared_models():
    found = method_imports(osp.join(REPO, PACKAGE))
    assert not found, '\n'.join(found)


def test_no_import_cycles():
    cycles = import_cycles(osp.join(REPO, PACKAGE))
    assert not cycles, '\n'.join(' <-> '.join(c) for c in cycles)


def test_the_cycle_and_method_checks_find_violations(tmp_path):
    files = {
        '__init__.py': '',
        'a.py': 'def f():\n    from .b import g\n',
        'b.py': 'from fake.c import h\n',
        'c.py': 'import fake.a\n',
        'd.py': 'from fake import b\n',
        'models/__init__.py': '',
        'models/stvit/__init__.py': 'from fake.models.hvit import x\n',
        'models/hvit/__init__.py': 'from fake.models.utils import y\n',
        'models/utils/__init__.py': '',
    }
    package_dir = tmp_path / 'fake'
    for name, text in files.items():
        (package_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (package_dir / name).write_text(text)
    assert import_cycles(str(package_dir), 'fake') == [
        ['fake.a', 'fake.b', 'fake.c']]
    found = method_imports(str(package_dir), 'fake')
    assert [f.split(': ')[0] for f in found] == [
        osp.join('fake', 'models', 'stvit', '__init__.py') + ':1'], found


def test_the_check_finds_every_kind_of_violation(tmp_path):
    """The checker itself: relative and function-level imports resolved,
    each rule of the table applied, file and line reported."""
    files = {
        '__init__.py': 'from . import models, engine\n',
        'registry.py': 'from mmengine.registry import MODELS\n',
        'ops/__init__.py': 'import torch\nfrom mmengine import Config\n',
        'ops/windows.py': 'from ..registry import MODELS\n',
        'models/__init__.py': 'from ..ops import windows\n',
        'models/vit.py': textwrap.dedent("""\
            from ..registry import MODELS
            from fake import ops


            def build():
                from ..apis import harness
                from fake.engine import hooks
                import fake.tiny.data
                return harness, hooks
            """),
        'engine/__init__.py': 'from ..models import vit\n',
        'tiny/__init__.py': 'import fake\nfrom .. import registry\n',
        'tiny/data/__init__.py': 'from ...models import vit\n',
        'apis/__init__.py': 'import fake\nfrom ..analysis import flops\n',
        'analysis/__init__.py': 'from tools import x\nfrom ..apis import y\n',
    }
    package_dir = tmp_path / 'fake'
    for name, text in files.items():
        (package_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (package_dir / name).write_text(text)
    found = upward_imports(str(package_dir), 'fake')
    where = sorted(line.split(': ')[0] for line in found)
    assert where == [
        osp.join('fake', 'analysis', '__init__.py') + ':1',
        osp.join('fake', 'apis', '__init__.py') + ':2',
        osp.join('fake', 'models', 'vit.py') + ':6',
        osp.join('fake', 'models', 'vit.py') + ':7',
        osp.join('fake', 'models', 'vit.py') + ':8',
        osp.join('fake', 'ops', '__init__.py') + ':2',
        osp.join('fake', 'ops', 'windows.py') + ':1',
        osp.join('fake', 'tiny', '__init__.py') + ':1',
        osp.join('fake', 'tiny', 'data', '__init__.py') + ':1',
    ], found


def _loaded_layers(statements):
    """The layers above ``models`` that a fresh interpreter has loaded after
    running ``statements``.

    Args:
        statements (str): Python code to run first.

    Returns:
        list[str]: The loaded modules of :data:`ABOVE_MODELS`.
    """
    check = textwrap.dedent(f"""\
        import json
        import sys
        loaded = [m for m in sys.modules
                  if m.split('.')[:2] in [[{PACKAGE!r}, layer]
                                          for layer in {ABOVE_MODELS!r}]]
        print(json.dumps(sorted(loaded)))
        """)
    result = subprocess.run([sys.executable, '-c', statements + check],
                            cwd=REPO,
                            capture_output=True,
                            text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_models_load_nothing_above_them():
    """``mmvitaccel.models`` loads without datasets, engine, tiny, apis or
    analysis.

    ``import mmvitaccel.models`` would first run ``mmvitaccel/__init__.py``,
    which imports engine on purpose (to register it), so the package's
    namespace is set up without running it; the environment fixes of
    :mod:`mmvitaccel.compat` are applied, as our tools do first.
    """
    package_dir = osp.join(REPO, PACKAGE)
    statements = textwrap.dedent(f"""\
        import importlib.util
        import sys
        spec = importlib.util.spec_from_file_location(
            {PACKAGE!r}, {osp.join(package_dir, '__init__.py')!r},
            submodule_search_locations=[{package_dir!r}])
        sys.modules[{PACKAGE!r}] = importlib.util.module_from_spec(spec)
        import mmvitaccel.compat
        mmvitaccel.compat.apply()
        import mmvitaccel.models
        """)
    loaded = _loaded_layers(statements)
    assert loaded == [], loaded


def test_import_mmvitaccel_loads_no_harness():
    """``import mmvitaccel`` registers models and engine, and loads nothing
    of the switch, apis, analysis or tiny, and nothing of the research
    harness beside the package (``projects/``): the study's datasets
    register only when a config imports ``projects.digits_study``."""
    loaded = _loaded_layers('import mmvitaccel\n')
    assert [m for m in loaded if m.split('.')[1] in
            ('switch', 'apis', 'analysis', 'tiny')] == [], loaded
    assert 'mmvitaccel.engine' in loaded
    check = textwrap.dedent("""\
        import sys
        import mmvitaccel
        from mmengine.registry import DATASETS, MODELS
        assert not [m for m in sys.modules if m.startswith('projects')]
        assert DATASETS.get('mmvitaccel.DigitsCanvas') is None
        import projects.digits_study
        assert DATASETS.get('mmvitaccel.DigitsCanvas') is not None
        assert MODELS.get('mmvitaccel.ConvStem') is not None
        """)
    result = subprocess.run([sys.executable, '-c', check], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
