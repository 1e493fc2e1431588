import os.path as osp
import sys

import pytest

# the repository's projects/ (the study's harness, which the study configs
# import as projects.digits_study), also in xdist workers
REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
if REPO not in sys.path:
    sys.path.append(REPO)


@pytest.fixture(scope='session')
def tiny_data_dir(tmp_path_factory):
    """One folder of generated tiny datasets shared by the whole session."""
    return tmp_path_factory.mktemp('tiny_data')


def _default_scopes():
    from mmengine.registry import DefaultScope
    return DefaultScope._instance_dict


@pytest.fixture(autouse=True)
def _no_leaked_default_scope():
    """Each test starts with the default scopes that existed before it: a
    runner built in one test (mmseg, mmdet, ...) must not decide which
    registry a later test's ``type`` names resolve in."""
    before = dict(_default_scopes())
    yield
    _default_scopes().clear()
    _default_scopes().update(before)


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    """The same for module and session fixtures, which are set up before
    the per-test snapshot above is taken: a module fixture that runs a
    study (its last runner mmaction's) would otherwise leave that scope
    current for every later test of the worker."""
    if fixturedef.scope == 'function':
        yield
        return
    before = dict(_default_scopes())
    yield
    _default_scopes().clear()
    _default_scopes().update(before)


def _memoize_config_formatting():
    """mmengine formats a config's text with yapf each time it prints or
    dumps it, up to three times per runner for the same text (about 5 s
    for a Cascade Mask R-CNN config here). The suite builds many runners,
    so the formatted text is memoized by input: the same output, once."""
    import functools

    from mmengine.config import config as mm_config
    format_code = mm_config.FormatCode

    @functools.lru_cache(maxsize=32)
    def formatted(text, style):
        return format_code(text, style_config=dict(style))

    def memoized(text, style_config=None, **kwargs):
        if kwargs or not isinstance(style_config, dict):
            return format_code(text, style_config=style_config, **kwargs)
        return formatted(text, tuple(sorted(style_config.items())))

    mm_config.FormatCode = memoized


_memoize_config_formatting()


def _threads_per_worker():
    """Under pytest-xdist (``make test`` runs one worker per core), each
    worker's torch gets its share of the cores: two workers with two
    threads each on two cores spin against each other several-fold."""
    import os
    workers = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '0'))
    if workers > 1:
        import torch
        threads = max(1, len(os.sched_getaffinity(0)) // workers)
        torch.set_num_threads(threads)
        os.environ['OMP_NUM_THREADS'] = str(threads)  # the tools they run


_threads_per_worker()


def _environment_fixes():
    """The suite runs as our tools do: with :mod:`mmvitaccel.compat`'s
    environment fixes applied first (``import mmvitaccel`` alone applies
    none; ``tests/test_plugin_citizenship.py`` checks that in a fresh
    interpreter)."""
    import mmvitaccel
    mmvitaccel.compat.apply()


_environment_fixes()
