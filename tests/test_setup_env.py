"""The set-up a new user runs first (``make test`` / ``make demo`` call
``tools/setup_env.sh``), exercised on its cold path without the real
minutes-long mmcv build.

The expensive steps are replaced from outside the script: ``PYTHON`` points
at a fake interpreter whose virtualenv ``python`` answers ``pip`` with no-ops
(recording what it was asked), and ``MMVITACCEL_MMCV_BUILD_CMD`` stands in for
``pip wheel`` in the unpacked mmcv sources. Everything else (paths, the cache,
directory changes, stamps, recovery) is the script itself, run the way
``make`` runs it: relative ``VENV``, empty cache.
"""
import os
import os.path as osp
import shutil
import stat
import subprocess
import sys
import textwrap

import pytest

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))

# The fake virtualenv interpreter. It must be called by a path that exists
# from the caller's directory, exactly like a real one.
_VENV_PYTHON = textwrap.dedent('''\
    #!/usr/bin/env bash
    VENV="$(cd "$(dirname "$0")/.." && pwd)"
    echo "$*" >> "$VENV/calls.log"
    if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
        shift 2
        case " $* " in
            *" --version "*) echo "pip 0 (fake)"; exit 0 ;;
            *" download "*)
                while [ $# -gt 0 ]; do [ "$1" = "-d" ] && dest="$2"; shift; done
                tmp="$(mktemp -d)"; mkdir -p "$tmp/mmcv-2.1.0"
                echo "extra_compile_args = ['-std=c++17']" > "$tmp/mmcv-2.1.0/setup.py"
                tar -czf "$dest/mmcv-2.1.0.tar.gz" -C "$tmp" mmcv-2.1.0; exit 0 ;;
            *" install "*.whl*) touch "$VENV/mmcv-installed"; exit 0 ;;
            *) exit 0 ;;
        esac
    fi
    if [ "$1" = "-" ]; then  # the mmcv-with-ops probe reads its code from stdin
        cat > /dev/null; [ -f "$VENV/mmcv-installed" ]; exit $?
    fi
    if [ "$1" = "-c" ]; then
        case "$2" in *"import mmvitaccel"*) echo "mmvitaccel (fake) ready"; exit 0 ;; esac
        exec {real} "$@"
    fi
    echo "fake python: unexpected call $*" >&2; exit 3
    ''')

# The fake base interpreter only makes virtualenvs.
_BASE_PYTHON = textwrap.dedent('''\
    #!/usr/bin/env bash
    [ "$1" = "-m" ] && [ "$2" = "venv" ] || {{ echo "unexpected: $*" >&2; exit 3; }}
    mkdir -p "$3/bin"; cp {venv_python} "$3/bin/python"; chmod +x "$3/bin/python"
    ''')

# Writes an mmcv wheel (a valid zip) where the script expects the build's output.
_GOOD_BUILD = (f'{sys.executable} -c "import os, zipfile; d = os.environ[\'MMCV_DIST\']; '
               'os.makedirs(d, exist_ok=True); '
               'zipfile.ZipFile(d + \'/mmcv-2.1.0-cp3-none-any.whl\', \'w\')'
               '.writestr(\'mmcv/__init__.py\', \'\')"; '
               'grep -q c++20 setup.py && echo "[7/7] c++ -o x.o" && echo built in "$PWD"')


def _write_exe(path, text):
    with open(path, 'w') as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def fake_repo(tmp_path):
    """A copy of the files the set-up reads, a fake interpreter and an empty cache."""
    repo = tmp_path / 'clone'
    (repo / 'tools').mkdir(parents=True)
    shutil.copy(osp.join(REPO, 'Makefile'), repo)
    shutil.copy(osp.join(REPO, 'setup.py'), repo)
    shutil.copy(osp.join(REPO, 'tools', 'setup_env.sh'), repo / 'tools')
    shutil.copytree(osp.join(REPO, 'requirements'), repo / 'requirements')
    fakes = tmp_path / 'fakes'
    fakes.mkdir()
    _write_exe(fakes / 'venv_python', _VENV_PYTHON.format(real=sys.executable))
    _write_exe(fakes / 'python', _BASE_PYTHON.format(venv_python=fakes / 'venv_python'))
    env = {k: v for k, v in os.environ.items()
           if k not in ('VENV', 'STACK', 'MAKEFLAGS', 'MAKELEVEL', 'MFLAGS')}
    env.update(PYTHON=str(fakes / 'python'), MMVITACCEL_CACHE=str(tmp_path / 'cache'),
               MMVITACCEL_MMCV_BUILD_CMD=_GOOD_BUILD, MMVITACCEL_PROGRESS_SECONDS='1',
               TMPDIR=str(tmp_path))
    return repo, env


def _run(cmd, cwd, env):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _wheels(env):
    cache = env['MMVITACCEL_CACHE']
    found = []
    for root, _, files in os.walk(cache):
        found += [f for f in files if f.endswith('.whl')]
    return found


def test_cold_setup_through_make(fake_repo):
    """`make setup` with the Makefile's relative VENV builds mmcv (in another
    directory), caches the wheel and installs it; the second run is a no-op."""
    repo, env = fake_repo
    out = _run(['make', 'setup'], repo, env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert 'building mmcv 2.1.0' in out.stdout
    assert 'ready' in out.stdout
    assert _wheels(env) == ['mmcv-2.1.0-cp3-none-any.whl']
    assert (repo / '.venv' / 'mmcv-installed').exists()
    assert (repo / '.venv' / '.mmvitaccel-setup-done').exists()
    again = _run(['make', 'setup'], repo, env)
    assert again.returncode == 0 and 'is up to date' in again.stdout


def test_relative_venv_from_another_directory(fake_repo, tmp_path):
    """A relative VENV means relative to the caller's directory, not the
    repository's or the build's."""
    repo, env = fake_repo
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir()
    env['VENV'] = 'envs/acc'
    out = _run(['bash', str(repo / 'tools' / 'setup_env.sh')], elsewhere, env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (elsewhere / 'envs' / 'acc' / '.mmvitaccel-setup-done').exists()
    assert not (repo / '.venv').exists()


def test_progress_lines_during_the_build(fake_repo):
    repo, env = fake_repo
    env['MMVITACCEL_MMCV_BUILD_CMD'] = 'echo "  [1/3] c++ -c a.cpp"; sleep 2.5; ' + _GOOD_BUILD
    out = _run(['make', 'setup'], repo, env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert 'compile step [1/3]' in out.stdout


def test_killed_build_then_recovery(fake_repo):
    """A build that dies leaves no wheel and no stamp; a damaged wheel in the
    cache (a copy cut short) is rebuilt, not installed."""
    repo, env = fake_repo
    env['MMVITACCEL_MMCV_BUILD_CMD'] = 'echo compiling; kill -9 $$'
    out = _run(['make', 'setup'], repo, env)
    assert out.returncode != 0
    assert 'the mmcv build failed' in out.stderr
    assert _wheels(env) == []
    assert not (repo / '.venv' / '.mmvitaccel-setup-done').exists()

    torch_pin = open(osp.join(REPO, 'requirements', 'torch.txt')).read().split('torch==')[1]
    tag = f'cp{sys.version_info[0]}{sys.version_info[1]}'
    wheel_dir = osp.join(env['MMVITACCEL_CACHE'], 'wheels',
                         f'torch-{torch_pin.split()[0]}-{tag}')
    os.makedirs(wheel_dir, exist_ok=True)
    with open(osp.join(wheel_dir, 'mmcv-2.1.0-cp3-none-any.whl'), 'wb') as f:
        f.write(b'PK\x03\x04 truncated')
    env['MMVITACCEL_MMCV_BUILD_CMD'] = _GOOD_BUILD
    out = _run(['make', 'setup'], repo, env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert 'removing a damaged cached wheel' in out.stdout
    assert 'building mmcv' in out.stdout
    assert (repo / '.venv' / '.mmvitaccel-setup-done').exists()


def test_install_into_the_environment_replaces_nothing(tmp_path):
    """`pip install -e .` into an existing OpenMMLab environment must not
    replace its torch or mmcv: the package requires what every user needs
    (torch, mmcv, mmengine, mmpretrain, numpy) in ranges such an
    environment meets, and the toolboxes and the pinned stack are extras.
    Resolved offline against what is installed: pip installs nothing but
    mmvitaccel."""
    report = tmp_path / 'report.json'
    out = subprocess.run(
        [sys.executable, '-m', 'pip', 'install', '--dry-run', '--no-index',
         '--no-build-isolation', '--quiet', '--report', str(report),
         '-e', REPO], capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PIP_CONFIG_FILE=os.devnull))
    assert out.returncode == 0, out.stderr
    import json
    items = json.loads(report.read_text())['install']
    assert [i['metadata']['name'] for i in items] == ['mmvitaccel']
    requires = items[0]['metadata'].get('requires_dist', [])
    unconditional = sorted(r.split('>')[0].split('<')[0].split('=')[0]
                           for r in requires if 'extra ==' not in r)
    assert unconditional == ['mmcv', 'mmengine', 'mmpretrain', 'numpy',
                             'torch'], unconditional
    assert any(r.startswith('mmdet') and 'extra ==' in r for r in requires)


_HIDE_MMCV_OPS = textwrap.dedent('''
    import sys
    class Hide:
        def find_spec(self, name, path=None, target=None):
            if name == 'mmcv._ext':
                raise ModuleNotFoundError("No module named 'mmcv._ext'")
    sys.meta_path.insert(0, Hide())
    import mmvitaccel
    mmvitaccel.compat.apply()  # what our tools do: no crash either
    from mmengine.registry import MODELS
    MODELS.build(dict(type='mmvitaccel.TokenPrunedVisionTransformer',
                      arch=dict(embed_dims=32, num_layers=2, num_heads=2,
                                feedforward_channels=64),
                      img_size=32, patch_size=16, prune_before=(1, )))
    try:
        MODELS.build(dict(type='mmvitaccel.STViTRSwinTransformer'))
    except ImportError as e:
        print(e)
        sys.exit(7)
    ''')


def test_missing_mmcv_ops_names_the_fix():
    '''Without mmcv's compiled ops (mmcv-lite) the package imports and its
    mmpretrain components build; a component of a toolbox that needs the
    ops (mmdet) refuses with both fixes named.'''
    out = subprocess.run([sys.executable, '-c', _HIDE_MMCV_OPS], capture_output=True,
                         text=True, timeout=300, cwd=REPO)
    assert out.returncode == 7, out.stdout + out.stderr
    assert 'needs mmdet' in out.stdout and 'compiled ops' in out.stdout
    assert 'tools/setup_env.sh' in out.stdout and 'MMCV_WITH_OPS=1' in out.stdout
