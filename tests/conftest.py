import pytest


@pytest.fixture(scope='session')
def tiny_data_dir(tmp_path_factory):
    """One folder of generated tiny datasets shared by the whole session."""
    return tmp_path_factory.mktemp('tiny_data')
