"""The documentation points at real files, and the model index agrees with it.

README.md and docs/*.md: links resolve (anchors included), every
``configs/...py`` they name exists, nothing points outside the repository.
model-index.yml: its metafiles parse, every model names an existing config,
and every figure a metafile gives is the one on the method page. The configs
added for the measurements load with mmengine and keep the settings the pages
describe.
"""
import glob
import os.path as osp
import re

import pytest
import yaml

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
README = osp.join(REPO, 'README.md')
DOC_FILES = [README] + sorted(glob.glob(osp.join(REPO, 'docs', '*.md')))
METHOD_PAGES = ('stvit.md', 'token_pruning.md', 'dgssa_glad.md',
                'hmhsa_cffn.md')
GENERAL_PAGES = ('get_started.md', 'benchmarks.md', 'guarantees.md',
                 'architecture.md', 'stvit_design.md',
                 'token_pruning_design.md', 'deployment.md', 'study.md')

FENCE = re.compile(r'^```.*?^```', re.S | re.M)
CODE_SPAN = re.compile(r'`[^`\n]*`')
LINK = re.compile(r'\[[^\]\n]*\]\(([^)\s]+)\)')
HEADING = re.compile(r'^#{1,6}\s+(.*?)\s*#*\s*$', re.M)
# a config path of this repository: not part of a longer path such as
# mmdet/.mim/configs/..., may use {a,b} alternatives and * (a glob)
CONFIG_PATH = re.compile(r'(?<![\w./-])configs/[\w./{},*<>-]*?\.py\b')
BRACES = re.compile(r'\{([^{}]*)\}')
OUTSIDE = ('/tmp/', '../shared', '/work/')


def _read(path):
    """Args: path (str): a text file. Returns: str: its UTF-8 text."""
    with open(path, encoding='utf-8') as f:
        return f.read()


def _rel(path):
    """Args: path (str). Returns: str: the path relative to the repo."""
    return osp.relpath(path, REPO)


def _prose(text):
    """Markdown without its code, where a link cannot be.

    Args:
        text (str): markdown.

    Returns:
        str: ``text`` without fenced code blocks and inline code spans.
    """
    return CODE_SPAN.sub('', FENCE.sub('', text))


def _slugs(text):
    """GitHub's anchors for the headings of a markdown text.

    Args:
        text (str): markdown.

    Returns:
        set[str]: the anchors: lower case, punctuation dropped, spaces as
        hyphens, ``-1``, ``-2`` ... appended to repeated headings.
    """
    seen, slugs = {}, set()
    for heading in HEADING.findall(FENCE.sub('', text)):
        slug = re.sub(r'[^\w\- ]', '', heading.strip().lower())
        slug = slug.replace(' ', '-')
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        slugs.add(slug if count == 0 else f'{slug}-{count}')
    return slugs


def _expand(pattern):
    """Shell-style brace expansion.

    Args:
        pattern (str): e.g. ``a_{x,y}_b``; several groups expand in turn.

    Returns:
        list[str]: e.g. ``['a_x_b', 'a_y_b']``.
    """
    m = BRACES.search(pattern)
    if m is None:
        return [pattern]
    out = []
    for choice in m.group(1).split(','):
        out += _expand(pattern[:m.start()] + choice + pattern[m.end():])
    return out


def _links(path):
    """Args: path (str): a markdown file. Returns: list[str]: the targets
    of its links, outside code."""
    return LINK.findall(_prose(_read(path)))


def test_slugs_and_expansion():
    assert _slugs('# A b\n## Any config: `--tiny`\n## A b\n') == {
        'a-b', 'any-config---tiny', 'a-b-1'
    }
    assert _expand('c/x_{t,s}_{a,b}.py') == [
        'c/x_t_a.py', 'c/x_t_b.py', 'c/x_s_a.py', 'c/x_s_b.py'
    ]
    assert CONFIG_PATH.findall('see `configs/a_{t,s}.py` and '
                               'mmdet/.mim/configs/b.py') == [
                                   'configs/a_{t,s}.py'
                               ]


def test_readme_is_short_and_links_every_page():
    text = _read(README)
    n_lines = len(text.splitlines())
    assert n_lines < 220, f'README.md has {n_lines} lines; keep it under 220'
    links = set(_links(README))
    for page in METHOD_PAGES + GENERAL_PAGES:
        assert f'docs/{page}' in links, f'README.md does not link docs/{page}'


@pytest.mark.parametrize('path', DOC_FILES, ids=_rel)
def test_relative_links_resolve(path):
    base = osp.dirname(path)
    for target in _links(path):
        if re.match(r'^[a-z]+:', target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition('#')
        dest = osp.normpath(osp.join(base, file_part)) if file_part else path
        assert osp.exists(dest), f'{_rel(path)}: broken link {target}'
        assert osp.commonpath([REPO, dest]) == REPO, (
            f'{_rel(path)}: {target} points outside the repository')
        if anchor and dest.endswith('.md'):
            assert anchor in _slugs(_read(dest)), (
                f'{_rel(path)}: {target}: no heading with anchor #{anchor}')


@pytest.mark.parametrize('path', DOC_FILES, ids=_rel)
def test_mentioned_configs_exist(path):
    for mention in CONFIG_PATH.findall(_read(path)):
        if '<' in mention:  # a placeholder such as configs/<config>.py
            continue
        for candidate in _expand(mention):
            found = glob.glob(osp.join(REPO, candidate))
            assert found, f'{_rel(path)} names {candidate}, which is missing'


@pytest.mark.parametrize(
    'path', DOC_FILES + [osp.join(REPO, 'model-index.yml')] +
    sorted(glob.glob(osp.join(REPO, 'configs', 'metafiles', '*.yml'))),
    ids=_rel)
def test_nothing_points_outside_the_repository(path):
    text = _read(path)
    for bad in OUTSIDE:
        assert bad not in text, f'{_rel(path)} mentions {bad}'


def _metafiles():
    """Returns: list[str]: the metafiles model-index.yml imports."""
    index = yaml.safe_load(_read(osp.join(REPO, 'model-index.yml')))
    return index['Import']


def _models():
    """Yields: tuple: ``(metafile path, parsed metafile, model entry)``."""
    for metafile in _metafiles():
        meta = yaml.safe_load(_read(osp.join(REPO, metafile)))
        for model in meta['Models']:
            yield metafile, meta, model


def test_model_index_imports_parse():
    metafiles = _metafiles()
    assert len(metafiles) == len(set(metafiles))
    for metafile in metafiles:
        meta = yaml.safe_load(_read(osp.join(REPO, metafile)))
        for coll in meta['Collections']:
            assert coll['Paper']['Title'], f'{metafile}: {coll["Name"]}'
            assert osp.isfile(osp.join(REPO, coll['README']))
        assert meta['Models'], f'{metafile} lists no model'


def test_model_index_models():
    names = set()
    for metafile, meta, model in _models():
        collections = {c['Name'] for c in meta['Collections']}
        assert model['In Collection'] in collections, (metafile, model)
        assert osp.isfile(osp.join(REPO, model['Config'])), (
            f'{metafile}: {model["Name"]}: no {model["Config"]}')
        assert model['Name'] not in names, f'{model["Name"]} listed twice'
        names.add(model['Name'])
        # speed ratios are not results, and no accuracy has been measured
        assert 'Results' not in model, model['Name']


def test_model_index_figures_are_the_pages_figures():
    """A metafile's Parameters / FLOPs, back in M / G, stand in a row of the
    method page that names the model's config."""
    for metafile, meta, model in _models():
        page = _read(osp.join(REPO, meta['Collections'][0]['README']))
        config = osp.basename(model['Config'])
        rows = [
            line for line in page.splitlines()
            if line.startswith('|') and f'/{config})' in line
        ]
        figures = [
            f'{model["Metadata"][key] / unit:g}'
            for key, unit in (('Parameters', 1e6), ('FLOPs', 1e9))
            if key in model.get('Metadata', {})
        ]
        if not figures:
            continue
        assert any(all(f in row for f in figures) for row in rows), (
            f'{metafile}: {model["Name"]}: {figures} not in a row of '
            f'{meta["Collections"][0]["README"]} naming {config}')


def test_every_recipe_is_in_the_model_index():
    listed = {osp.normpath(model['Config']) for _, _, model in _models()}
    recipes = {
        osp.relpath(p, REPO)
        for p in glob.glob(osp.join(REPO, 'configs', '*.py'))
    }
    assert recipes - listed == set()


def _load(config):
    """Args: config (str): a path under configs/. Returns: Config."""
    from mmengine.config import Config
    return Config.fromfile(osp.join(REPO, 'configs', config))


@pytest.mark.parametrize('config,density', [
    ('sait_deit_s_d042_in1k.py', 0.42),
])
def test_fixed_density_sait(config, density):
    cfg = _load(config)
    base = _load('sait_deit_s_v05_in1k.py')
    assert cfg.model.backbone.selector == 'value'
    assert cfg.model.backbone.density == density
    assert dict(cfg.model.test_cfg) == dict(density=density)
    # everything else is SaiT-S/V0.5
    cfg.model.backbone.density = base.model.backbone.density
    cfg.model.test_cfg = base.model.test_cfg
    assert cfg.model.to_dict() == base.model.to_dict()


@pytest.mark.parametrize('config,base', [
    ('asvit_deit_s_r065_in1k.py', 'asvit_deit_s_in1k.py'),
    ('asvit_deit_t_r065_in1k.py', 'asvit_deit_t_in1k.py'),
])
def test_fixed_keep_ratio_asvit(config, base):
    cfg, base = _load(config), _load(base)
    backbone = cfg.model.backbone
    assert (backbone.selector, backbone.density) == ('value', 0.65)
    assert backbone.prune_before == (4, 7, 10)
    assert cfg.model.teacher is None and cfg.model.budget is None
    assert cfg.model.token_distill_weight == 0.
    assert backbone.arch == base.model.backbone.arch
    assert cfg.model.head.to_dict() == base.model.head.to_dict()


HVIT_DEPLOY = sorted(
    glob.glob(osp.join(REPO, 'configs', 'hvit_deploy', '*.py')))


@pytest.mark.parametrize('path', HVIT_DEPLOY, ids=osp.basename)
def test_hvit_deploy_variants(path):
    name = osp.splitext(osp.basename(path))[0]
    host = next(h for h in ('pvtv2_b1', 'deit_s', 'swin_t')
                if name.startswith(h))
    variant = name[len(host) + 1:]
    recipe = {
        'pvtv2_b1': 'hvit_pvtv2_b1_tinyimagenet.py',
        'deit_s': 'hvit_deit_s_in1k.py',
        'swin_t': 'hvit_swin_t_in1k.py'
    }[host]
    cfg = _load(osp.join('hvit_deploy', osp.basename(path)))
    base = _load(recipe)
    backbone = cfg.model.backbone
    assert backbone.deploy is True
    assert backbone.hmhsa is (variant in ('hmhsa', 'hmhsa_cffn'))
    assert backbone.cffn is (variant in ('cffn', 'hmhsa_cffn'))
    for key in ('deploy', 'hmhsa', 'cffn'):
        backbone.pop(key)
        base.model.backbone.pop(key, None)
    assert backbone.to_dict() == base.model.backbone.to_dict()


def test_the_study_tables_are_the_committed_csv():
    """The study's tables in the README (host and trained methods) and in
    docs/study.md (every row) are rendered from docs/study/study.csv, the
    file the study command wrote: no figure is typed by hand."""
    from projects.digits_study import study
    rows = study.read_csv(osp.join(REPO, 'docs', 'study', 'study.csv'))
    assert rows[0]['method'] == 'host'
    assert study.markdown_table(rows, references=False) in _read(README)
    assert study.markdown_table(rows) in _read(
        osp.join(REPO, 'docs', 'study.md'))


def test_the_dense_study_tables_are_the_committed_csv():
    """The dense evidence's table in the README and in docs/study.md is
    rendered from docs/study/dense/dense.csv, the file
    tools/analysis/dense_study.py wrote."""
    from projects.digits_study.study import dense_report
    rows = dense_report.read_dense_csv(
        osp.join(REPO, 'docs', 'study', 'dense', 'dense.csv'))
    assert rows[0]['reference'] is None
    table = dense_report.dense_markdown_table(rows)
    assert table in _read(README)
    assert table in _read(osp.join(REPO, 'docs', 'study.md'))


def test_the_training_free_table_is_the_committed_csv():
    """docs/accelerate.md's training-free table is rendered from
    docs/study/training_free.csv, the file tools/analysis/training_free.py
    wrote."""
    from projects.digits_study.study import training_free
    rows = training_free.read_rows(
        osp.join(REPO, 'docs', 'study', 'training_free.csv'))
    assert rows[0]['method'] == 'host'
    table = training_free.markdown_table(rows)
    assert table in _read(osp.join(REPO, 'docs', 'accelerate.md'))
