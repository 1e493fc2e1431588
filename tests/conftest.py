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
