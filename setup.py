import os.path as osp

from setuptools import find_packages, setup


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


setup(
    name='mmvitaccel',
    version=get_version(),
    description='Token sparsification and attention acceleration for vision '
    'transformers, as an OpenMMLab 2.x plugin',
    long_description=readme(),
    long_description_content_type='text/markdown',
    packages=find_packages(exclude=('configs', 'tools', 'tests')),
    include_package_data=True,
    python_requires='>=3.8',
    # The OpenMMLab stack (mmcv with ops in particular) is expected to be
    # installed already; tools/setup_env.sh builds the pinned one.
    install_requires=[],
    extras_require=dict(
        stack=parse_requirements('runtime.txt'),
        tests=parse_requirements('tests.txt'),
    ),
    license='Apache License 2.0',
    zip_safe=False,
)
