import pytest


@pytest.fixture(scope='session')
def tiny_data_dir(tmp_path_factory):
    """One folder of generated tiny datasets shared by the whole session."""
    return tmp_path_factory.mktemp('tiny_data')


@pytest.fixture(autouse=True)
def _no_leaked_default_scope():
    """Each test starts with the default scopes that existed before it: a
    runner built in one test (mmseg, mmdet, ...) must not decide which
    registry a later test's ``type`` names resolve in."""
    from mmengine.registry import DefaultScope
    before = dict(DefaultScope._instance_dict)
    yield
    DefaultScope._instance_dict.clear()
    DefaultScope._instance_dict.update(before)
