import os
import os.path as osp
import shutil
import sys

from setuptools import find_packages, setup

# What `mim` reads from an installed OpenMMLab package: its configs, tools and
# model index, under <package>/.mim (the toolboxes ship theirs the same way).
MIM_FILES = ('configs', 'tools', 'model-index.yml')
# The research harness's configs and tools (projects/digits_study), which a
# wheel does not carry: they need the repository.
STUDY_FILES = ('study', 'tradeoff_study.py', 'dense_study.py',
               'training_free.py')

# What every user needs; torch and mmcv (with its compiled ops) are expected
# in place, as for the toolboxes (tools/setup_env.sh builds the tested ones).
# The ranges hold the tested versions (torch 2.1 to 2.14, mmcv 2.1.0,
# mmengine 0.10.7, mmpretrain 1.2.0: requirements/oldest.txt and
# runtime.txt), and no more than an existing OpenMMLab 2.x environment
# meets: installing into one replaces nothing (tests/test_setup_env.py).
INSTALL_REQUIRES = [
    'torch>=2.1',
    'mmcv>=2.0.0,<2.2.0',  # mmdet 3.3's range; 2.1.0 tested
    'mmengine>=0.10.0,<1.0.0',
    'mmpretrain>=1.2.0,<1.3.0',
    'numpy',
]


def readme():
    with open(osp.join(osp.dirname(__file__), 'README.md'), encoding='utf-8') as f:
        return f.read()


def get_version():
    scope = {}
    with open(osp.join(osp.dirname(__file__), 'mmvitaccel', 'version.py')) as f:
        exec(f.read(), scope)
    return scope['__version__']


def parse_requirements(fname):
    path = osp.join(osp.dirname(__file__), 'requirements', fname)
    reqs = []
    with open(path) as f:
        for line in f:
            line = line.split('#')[0].strip()
            if line:
                reqs.append(line)
    return reqs


def toolbox_requirement(name):
    """The tested pin of one OpenMMLab toolbox, from ``runtime.txt``.

    Args:
        name (str): its distribution name, e.g. ``'mmdet'``.

    Returns:
        list[str]: ``['mmdet==3.3.0']``.
    """
    found = [r for r in parse_requirements('runtime.txt')
             if r.split('==')[0] == name]
    if len(found) != 1:
        raise ValueError(f'{name} is not pinned in requirements/runtime.txt')
    return found


def add_mim_files():
    """Put the files `mim` reads into ``mmvitaccel/.mim`` before building.

    An editable install (``pip install -e .``, which runs ``editable_wheel``
    or, with old tools, ``develop``) gets relative symlinks, so the package
    always sees the repository's current configs; a wheel or an sdist gets
    copies. Other commands (``egg_info`` ...) leave the folder as it is.
    MANIFEST.in then takes ``mmvitaccel/.mim`` into the package data.

    Returns:
        str | None: ``'symlink'`` or ``'copy'``, the mode used, or None when
        the command builds nothing.
    """
    if 'develop' in sys.argv or 'editable_wheel' in sys.argv:
        mode = 'copy' if os.name == 'nt' else 'symlink'
    elif 'sdist' in sys.argv or 'bdist_wheel' in sys.argv:
        mode = 'copy'
    else:
        return None
    repo = osp.dirname(osp.abspath(__file__))
    mim = osp.join(repo, 'mmvitaccel', '.mim')
    os.makedirs(mim, exist_ok=True)
    for name in MIM_FILES:
        src = osp.join(repo, name)
        dst = osp.join(mim, name)
        if osp.islink(dst) or osp.isfile(dst):
            os.remove(dst)
        elif osp.isdir(dst):
            shutil.rmtree(dst)
        if mode == 'symlink':
            os.symlink(osp.relpath(src, mim), dst)
        elif osp.isdir(src):
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns(
                '__pycache__', *STUDY_FILES))
        else:
            shutil.copyfile(src, dst)
    return mode


add_mim_files()
setup(
    name='mmvitaccel',
    version=get_version(),
    description='Token sparsification and attention acceleration for vision '
    'transformers, as an OpenMMLab 2.x plugin',
    long_description=readme(),
    long_description_content_type='text/markdown',
    packages=find_packages(
        exclude=('configs', 'tools', 'tests', 'projects', 'projects.*')),
    include_package_data=True,
    python_requires='>=3.8',
    # Each toolbox is an extra: the components on its blocks register only
    # where it imports (mmvitaccel/toolboxes.py).
    install_requires=INSTALL_REQUIRES,
    extras_require=dict(
        mmdet=toolbox_requirement('mmdet'),
        mmseg=toolbox_requirement('mmsegmentation'),
        mmaction=toolbox_requirement('mmaction2'),
        stack=parse_requirements('runtime.txt'),
        study=[r for r in parse_requirements('study.txt')
               if r.startswith('scikit-learn')],
        deploy=[r for r in parse_requirements('study.txt')
                if r.startswith('onnx')],
        tests=parse_requirements('tests.txt'),
    ),
    license='Apache License 2.0',
    zip_safe=False,
)
