"""The documentation points at real files, and the model index agrees with it.

README.md and docs/*.md: links resolve (anchors included), every
``configs/...py`` they name exists, nothing points outside the repository;
docs/README.md lists every page. model-index.yml: its metafiles parse, every
model names an existing config, and every figure a metafile gives is the one
on the method page; docs/zoo.md and the README's summary are what
tools/misc/zoo_tables.py renders from it. The configs added for the
measurements load with mmengine and keep the settings the pages describe.
"""
import glob
import os.path as osp
import re
import subprocess
import sys

import pytest
import yaml

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
sys.path.insert(0, osp.join(REPO, 'tools', 'misc'))
import zoo_tables  # noqa: E402

README = osp.join(REPO, 'README.md')
DOCS_INDEX = osp.join(REPO, 'docs', 'README.md')
DOC_FILES = [README] + sorted(glob.glob(osp.join(REPO, 'docs', '*.md')))
METHOD_PAGES = ('stvit.md', 'token_pruning.md', 'dgssa_glad.md',
                'hmhsa_cffn.md', 'tome.md')
GENERAL_PAGES = ('get_started.md', 'benchmarks.md', 'guarantees.md',
                 'architecture.md', 'stvit_design.md',
                 'token_pruning_design.md', 'deployment.md', 'study.md',
                 'README.md', 'zoo.md', 'accelerate.md')

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
    assert n_lines < 150, f'README.md has {n_lines} lines; keep it under 150'
    links = set(_links(README))
    for page in METHOD_PAGES + GENERAL_PAGES:
        assert f'docs/{page}' in links, f'README.md does not link docs/{page}'


def test_docs_index_lists_every_page():
    """docs/README.md links every page of docs/ (the README links it), one
    list item each."""
    listed = re.findall(r'^- \[[^\]]*\]\(([^)]+)\)', _read(DOCS_INDEX), re.M)
    pages = {osp.basename(p) for p in DOC_FILES[1:]} - {'README.md'}
    assert sorted(listed) == sorted(pages), (
        f'docs/README.md lists {sorted(listed)}, not each of {sorted(pages)}')


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
    """A metafile's Parameters / FLOPs, back in M / G, and its zoo speed
    ratios stand in a row of the method page that names the model's
    config."""
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
        ] + [  # the zoo's speed ratios, median (q1–q3)
            '{:.2f} ({:.2f}–{:.2f})'.format(*ratio) for key, ratio in
            model.get('Metadata', {}).get('Zoo', {}).items()
            if key.startswith('Speed b')
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


def _summary():
    """Returns: list[tuple[dict, list[str]]]: each collection's ``Summary``
    entry with its row of the README's summary table (the cells)."""
    block = re.search(r'<!-- summary:start[^\n]*\n(.*?)<!-- summary:end',
                      _read(README), re.S)
    assert block, 'README.md has no summary table'
    rows = {}
    for line in block.group(1).splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip('|').split(' | ')]
        rows[re.match(r'\[([^\]]+)\]', cells[0]).group(1)] = cells
    return [(entry, rows[entry['Method']])
            for coll in zoo_tables.load_index()[0]
            for entry in coll['Summary']]


def _numbers(text):
    """Args: text (str). Returns: list[float]: its signed decimals."""
    return [float(n) for n in
            re.findall(r'[+-]?\d+\.\d+', text.replace('−', '-'))]


def test_the_study_tables_are_the_committed_csv():
    """docs/study.md's table of every row is rendered from
    docs/study/study.csv, the file the study command wrote; the README
    summary's digits column is each method's short-table rows' top-1 change
    against the host (FLOPs ratio), from the same CSV."""
    from projects.digits_study import study
    rows = study.read_csv(osp.join(REPO, 'docs', 'study', 'study.csv'))
    assert rows[0]['method'] == 'host'
    assert study.markdown_table(rows) in _read(
        osp.join(REPO, 'docs', 'study.md'))
    for entry, cells in _summary():
        mine = [r for r in rows if r['method'] in entry['Study'] and
                r['summary'] and not r['method'].endswith(' pruning')]
        assert len(mine) >= len(entry['Study']), entry
        assert _numbers(cells[5]) == [
            x for r in mine for x in (round(100 * (
                r['top1_mean'] - rows[0]['top1_mean']), 1),
                                      round(r['flops_ratio'], 2))], entry


def test_the_dense_study_tables_are_the_committed_csv():
    """The dense evidence's table in docs/study.md is rendered from
    docs/study/dense/dense.csv, the file tools/analysis/dense_study.py
    wrote; the README summary's dense column has the changes of that
    table's fine-tuned rows of each method."""
    from projects.digits_study.study import dense_report
    rows = dense_report.read_dense_csv(
        osp.join(REPO, 'docs', 'study', 'dense', 'dense.csv'))
    assert rows[0]['reference'] is None
    table = dense_report.dense_markdown_table(rows)
    assert table in _read(osp.join(REPO, 'docs', 'study.md'))
    lines = table.splitlines()
    change = lines[0].split(' | ').index('change')
    for entry, cells in _summary():
        expected = [
            x for i, r in enumerate(rows) if r['method'] in entry['Dense']
            and r['setting'] == 'fine-tuned'
            for x in _numbers(lines[2 + i].split(' | ')[change])]
        assert len(expected) >= len(entry['Dense']), entry
        assert _numbers(cells[6]) == expected, entry


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


def test_the_swin_design_table_is_the_committed_csv():
    """docs/tome.md's table of ToMe's Swin designs is rendered from
    docs/study/dense/tome_swin_designs.csv, the file
    tools/analysis/tome_swin_designs.py wrote."""
    from projects.digits_study.study import tome_designs
    rows = tome_designs.read_design_csv(
        osp.join(REPO, 'docs', 'study', 'dense', 'tome_swin_designs.csv'))
    assert {r['task'] for r in rows} == {'detection', 'segmentation'}
    assert {r['design'] for r in rows} >= {'host', 'window', 'stage',
                                           'STViT-R', 'DGSSA-Swin'}
    table = tome_designs.design_markdown_table(rows)
    assert table in _read(osp.join(REPO, 'docs', 'tome.md'))


def test_the_training_free_plot_draws_every_method(tmp_path, monkeypatch):
    """``training_free.py --plot CSV`` draws a series for each method of
    the classification rows and each design and peer of the dense rows,
    one panel a task."""
    import matplotlib.axes
    sys.path.insert(0, osp.join(REPO, 'tools', 'analysis'))
    import training_free as tool
    designs = tmp_path / 'designs.csv'
    designs.write_text(
        'task,design,setting,metric,value,std,change,backbone_gflops,'
        'flops_ratio,seeds\n'
        'detection,host,dense,bbox_mAP,55,0.5,0,1,1,2\n'
        'detection,window,r=8,bbox_mAP,54,0.5,-1,0.8,0.8,2\n'
        'detection,window,r=16,bbox_mAP,53,0.5,-2,0.7,0.7,2\n'
        'detection,STViT-R,training-free,bbox_mAP,52,0.5,-3,0.8,0.8,2\n')
    drawn = []
    errorbar = matplotlib.axes.Axes.errorbar

    def record(ax, x, y, *args, **kwargs):
        drawn.append((ax.get_title(), kwargs['label'], len(x)))
        return errorbar(ax, x, y, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, 'errorbar', record)
    csv = osp.join(REPO, 'docs', 'study', 'training_free.csv')
    tool.main(['--plot', csv, '--designs-csv', str(designs), '--out',
               str(tmp_path)])
    assert (tmp_path / 'training_free.png').stat().st_size > 1000
    labels = {label for _, label, _ in drawn}
    assert {'tis', 'cls', 'tome', 'tis merged', 'ToMe, window design',
            'STViT-R'} <= labels
    assert ('ToMe, window design', 2) in {(l, n) for _, l, n in drawn}


def test_zoo_tables_are_rendered_from_the_model_index():
    """docs/zoo.md (a row per zoo model) and the README's summary are what
    tools/misc/zoo_tables.py writes, and its --check says so."""
    texts = zoo_tables.rendered()
    assert sorted(texts) == ['README.md', 'docs/zoo.md']
    assert zoo_tables.stale(texts) == [], 'run tools/misc/zoo_tables.py'
    done = subprocess.run(
        [sys.executable, 'tools/misc/zoo_tables.py', '--check'], cwd=REPO,
        capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    zoo = _read(osp.join(REPO, 'docs', 'zoo.md'))
    for model in zoo_tables.zoo_models(zoo_tables.load_index()[1]):
        assert f'](../{model["Config"]}) |' in zoo, model['Name']


def test_zoo_tables_find_a_stale_file():
    """A figure changed in a metafile changes docs/zoo.md's table, a text
    unlike the committed one is stale, a file without markers is refused."""
    texts = zoo_tables.rendered()
    models = zoo_tables.load_index()[1]
    table = zoo_tables.zoo_table(models)
    assert table in texts[zoo_tables.ZOO_PAGE]
    zoo_tables.zoo_models(models)[0]['Metadata']['Zoo']['Speed b1'][0] += .01
    assert zoo_tables.zoo_table(models) not in texts[zoo_tables.ZOO_PAGE]
    assert zoo_tables.stale(dict(texts, **{'README.md': texts[
        'README.md'].replace('| DeiT, Swin, Video Swin |', '| DeiT |')
    })) == ['README.md']
    with pytest.raises(ValueError, match='summary'):
        zoo_tables.replace_block('# no markers\n', 'summary', table)


def test_a_deployed_cell_marks_a_runtime_not_measured():
    """A ``Deployed b<N>`` of onnxruntime alone (or a null) renders its
    missing compile ratio as a dash, not as a number or an error."""
    assert zoo_tables._deployed_cell({'Deployed b1': [0.95]}) == '0.95 / —'
    assert zoo_tables._deployed_cell(
        {'Deployed b1': [None, 1.2], 'Deployed b32': [1.5, 1.7]}) == (
            '— / 1.20; 1.50 / 1.70 at batch 32')
    assert zoo_tables._deployed_cell({}) == '—'


@pytest.mark.parametrize('page', METHOD_PAGES)
def test_method_pages_open_with_use_it(page):
    """Right under its title, a method page gives the switch, the config,
    the checkpoint (one quoted by file name is one of the configs') and the
    expected cut, in figures of the zoo rows of the configs it names."""
    from mmvitaccel.switch import METHODS
    lines = _read(osp.join(REPO, 'docs', page)).splitlines()
    assert lines[0].startswith('# ') and lines[1:3] == ['', '**Use it.**']
    keys = ('- Switch: ', '- Config: ', '- Checkpoint: ', '- Expected cut')
    for line, key in zip(lines[3:7], keys):
        assert line.startswith(key), f'docs/{page}: {line!r} is not {key}'
    switch, config, checkpoint, cut = lines[3:7]
    method = re.search(r'tools/accelerate\.py \S+ --method (\S+)', switch)
    assert method and method.group(1) in METHODS, switch
    configs = re.findall(r'\(\.\./(configs/\w+\.py)\)', config)
    zoo = [line for line in _read(osp.join(REPO, 'docs', 'zoo.md')).split(
        '\n') if any(f'(../{c})' in line for c in configs)]
    assert configs and len(zoo) == len(configs), config
    in_zoo = {abs(n) for n in _numbers(' '.join(zoo))}
    for figure in _numbers(cut):
        assert abs(figure) in in_zoo, f'docs/{page}: {figure} not in {zoo}'
    texts = [_read(osp.join(REPO, c)) for c in configs]
    for quoted in CODE_SPAN.findall(checkpoint):
        if quoted.endswith('.pth`'):
            name = osp.basename(quoted.strip('`'))
            assert any(name in text for text in texts), quoted
