"""The wheel a user installs: ``python -m build`` makes it from a copy of
the repository; it holds the package, its ``mim`` files and nothing of the
research harness (``projects/``, the study's code, configs and tools, the
digits data); installed into a fresh virtualenv that sees torch, mmcv and
mmpretrain (with what they require) and nothing else, it imports, builds a
DeiT-based component and names mmdet when asked for a Swin one.
"""
import json
import os
import os.path as osp
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile

import pytest
from packaging.requirements import Requirement

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))

#: what a copy of the repository leaves out: VCS, venvs, outputs, caches
_NOT_COPIED = ('.git', '.venv*', 'work_dirs', 'data', 'dist', 'build',
               '__pycache__', '*.egg-info', '.mim', '.pytest_cache',
               '.hypothesis')
#: what the fresh venv sees, with their requirements (pip installs there;
#: mmpretrain 1.2 imports torchvision without declaring it)
_VISIBLE = ('torch', 'torchvision', 'mmcv', 'mmpretrain', 'pip')


SITE = sysconfig.get_paths()['purelib']


def _requirement_closure(names):
    """Args: names (tuple[str]): distributions. Returns: dict: name ->
    ``importlib.metadata.Distribution`` of them and of all they require,
    transitively, with the extras each requirement names (torch's
    ``cuda-toolkit[cublas, ...]``: without them pip would take another
    torch)."""
    import importlib.metadata as md
    found, done, todo = {}, set(), [(n, '') for n in names]
    while todo:
        name, extra = todo.pop()
        name = re.sub(r'[-_.]+', '-', name).lower()
        if (name, extra) in done:
            continue
        done.add((name, extra))
        try:
            found[name] = dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        for line in dist.requires or ():
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({'extra': extra}):
                todo += [(req.name, e) for e in ('', *req.extras)]
    return found


def _top_level_entries(names):
    """Args: names (tuple[str]): distributions. Returns: set[str]: the
    site-packages entries (packages, modules, ``.dist-info``) of them and
    of what they require."""
    entries = set()
    for dist in _requirement_closure(names).values():
        for file in dist.files or ():
            top = file.parts[0]
            if top not in ('..', '__pycache__', 'tests') and \
                    not top.endswith('.pth') and \
                    osp.exists(osp.join(SITE, top)):
                entries.add(top)
    return entries


def test_the_venv_sees_the_required_packages_and_no_toolbox():
    entries = _top_level_entries(_VISIBLE)
    assert {'torch', 'mmcv', 'mmengine', 'mmpretrain', 'numpy'} <= entries
    assert not entries & {'mmdet', 'mmseg', 'mmaction', 'mmvitaccel',
                          'projects', 'sklearn', 'onnx', 'hypothesis'}


@pytest.fixture(scope='module')
def wheel(tmp_path_factory):
    """Args: tmp_path_factory. Returns: str: the wheel built from a copy of
    the repository (building writes ``mmvitaccel/.mim``, ``build/``)."""
    root = tmp_path_factory.mktemp('wheel')
    src = osp.join(root, 'src')
    shutil.copytree(REPO, src, symlinks=True,
                    ignore=shutil.ignore_patterns(*_NOT_COPIED))
    result = subprocess.run(
        [sys.executable, '-m', 'build', '--wheel', '--no-isolation',
         '--outdir', osp.join(root, 'dist'), src],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    wheels = [f for f in os.listdir(osp.join(root, 'dist'))
              if f.endswith('.whl')]
    assert len(wheels) == 1, wheels
    return osp.join(root, 'dist', wheels[0])


def _harness_files(names):
    """Args: names (list[str]): a wheel's files. Returns: list[str]: those
    of the research harness."""
    return [n for n in names
            if n.startswith('projects/') or '/study/' in n
            or 'digits' in n or osp.basename(n) in (
                'tradeoff_study.py', 'dense_study.py', 'training_free.py',
                'conv_stem.py', 'swin_layout.py')
            or n.endswith(('.npz', '.npy', '.pth'))]


def test_the_check_finds_harness_files():
    assert _harness_files([
        'mmvitaccel/models/stvit/stvit_deit.py',
        'mmvitaccel/.mim/configs/stvit_deit_s_in1k.py',
        'projects/digits_study/__init__.py',
        'mmvitaccel/.mim/configs/study/sait_digits.py',
        'mmvitaccel/.mim/tools/analysis/dense_study.py',
        'mmvitaccel/datasets/digits_canvas.py',
    ]) == [
        'projects/digits_study/__init__.py',
        'mmvitaccel/.mim/configs/study/sait_digits.py',
        'mmvitaccel/.mim/tools/analysis/dense_study.py',
        'mmvitaccel/datasets/digits_canvas.py',
    ]


@pytest.mark.slow
def test_the_wheel_holds_the_package_and_no_harness(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        metadata = z.read(next(n for n in names
                               if n.endswith('.dist-info/METADATA'))).decode()
    assert _harness_files(names) == []
    for needed in ('mmvitaccel/__init__.py',
                   'mmvitaccel/models/stvit/stvit_deit.py',
                   'mmvitaccel/switch/accelerate.py',
                   'mmvitaccel/.mim/model-index.yml',
                   'mmvitaccel/.mim/configs/stvit_r_swin_s_coco.py',
                   'mmvitaccel/.mim/tools/train.py'):
        assert needed in names, needed
    requires = [line.split(': ', 1)[1] for line in metadata.splitlines()
                if line.startswith('Requires-Dist: ')]
    plain = sorted(r.split(';')[0].strip() for r in requires
                   if 'extra ==' not in r)
    assert [re.split(r'[<>=!~ ]', r)[0] for r in plain] == [
        'mmcv', 'mmengine', 'mmpretrain', 'numpy', 'torch'], plain
    extras = {line.split(': ', 1)[1] for line in metadata.splitlines()
              if line.startswith('Provides-Extra: ')}
    assert {'mmdet', 'mmseg', 'mmaction', 'study', 'deploy'} <= extras


@pytest.mark.slow
def test_the_wheel_installs_imports_and_builds_without_the_toolboxes(
        wheel, tmp_path):
    """A fresh venv whose only other packages are torch, mmcv, mmpretrain
    and what they require, from this environment (a ``.pth`` to a folder of
    links): ``pip install`` of the
    wheel resolves its requirements there, offline (no index, no pip
    configuration of the machine)."""
    visible = tmp_path / 'visible'
    visible.mkdir()
    for entry in sorted(_top_level_entries(_VISIBLE)):
        os.symlink(osp.join(SITE, entry), visible / entry)
    venv = tmp_path / 'venv'
    # without pip: its own (older) setuptools would shadow the one torch
    # requires; pip comes from the visible packages
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(venv)],
                   check=True, timeout=300)
    python = str(venv / 'bin' / 'python')
    venv_site = subprocess.run(
        [python, '-c', 'import sysconfig; '
         'print(sysconfig.get_paths()["purelib"])'],
        capture_output=True, text=True, check=True).stdout.strip()
    with open(osp.join(venv_site, 'visible.pth'), 'w') as f:
        f.write(str(visible) + '\n')
    install = subprocess.run(
        [python, '-m', 'pip', 'install', '--no-index', '-q', wheel],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env=dict(os.environ, PIP_CONFIG_FILE=os.devnull))
    assert install.returncode == 0, install.stdout + install.stderr
    check = textwrap.dedent("""\
        import importlib.util, json
        import mmvitaccel
        from mmengine.registry import MODELS
        from mmvitaccel.toolboxes import ToolboxMissing
        deit = MODELS.build(dict(
            type='mmvitaccel.TokenPrunedVisionTransformer', img_size=32,
            patch_size=16, prune_before=(1, ), arch=dict(
                embed_dims=32, num_layers=2, num_heads=2,
                feedforward_channels=64)))
        try:
            MODELS.build(dict(type='mmvitaccel.STViTRSwinTransformer'))
            error = None
        except ToolboxMissing as e:
            error = str(e)
        print(json.dumps(dict(
            file=mmvitaccel.__file__, params=sum(
                p.numel() for p in deit.parameters()),
            mmdet=importlib.util.find_spec('mmdet') is not None,
            projects=importlib.util.find_spec('projects') is not None,
            error=error)))
        """)
    result = subprocess.run([python, '-c', check], capture_output=True,
                            text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found['file'].startswith(venv_site), found
    assert found['params'] > 0
    assert not found['mmdet'] and not found['projects'], found
    assert 'mmdet' in found['error'], found
