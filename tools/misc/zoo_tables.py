# Copyright (c) mmvitaccel contributors. All rights reserved.
"""Render the model zoo and the README's summary from the model index.

The figures of the zoo are written once, in the metafiles that
``model-index.yml`` imports (each zoo model's ``Metadata.Zoo``, each
collection's ``Summary``; ``model-index.yml`` describes the keys). This tool
renders from them, and from the study's committed CSVs:

* ``docs/zoo.md``: the table between ``<!-- zoo:start ... -->`` and
  ``<!-- zoo:end -->``, one row per zoo model;
* ``README.md``: the table between ``<!-- summary:start ... -->`` and
  ``<!-- summary:end -->``, one row per method: its hosts, the range of its
  zoo models' FLOPs cut and speed ratios, its top-1 change on the digits
  study (``docs/study/study.csv``) and its changes in dense prediction
  (``docs/study/dense/dense.csv``), and one of its paper's figures.

The text around the markers is written by hand. Usage::

    python tools/misc/zoo_tables.py          # rewrite both tables
    python tools/misc/zoo_tables.py --check  # exit 1 when a file is stale

Only the standard library and PyYAML are needed.
"""
import argparse
import csv
import os.path as osp
import posixpath
import re
import sys

import yaml

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
INDEX = 'model-index.yml'
STUDY_CSV = 'docs/study/study.csv'
DENSE_CSV = 'docs/study/dense/dense.csv'
ZOO_PAGE = 'docs/zoo.md'
README = 'README.md'
#: the dense study's metrics, as the summary names them
DENSE_METRICS = (('bbox_ap', 'box AP'), ('segm_ap', 'mask AP'),
                 ('miou', 'mIoU'), ('top1', 'video top-1'))
ZOO_HEAD = ('| model | config | params (M) | GFLOPs | speed ratio (CPU) | '
            'backbone deployed: onnxruntime / compile | paper | page |')
SUMMARY_HEAD = ('| method | hosts | FLOPs cut (%) | speed ratio, batch 1 | '
                'speed ratio, batch 32 | digits: top-1 change (FLOPs ratio) '
                '| dense: change, fine-tuned | paper (GPU) |')


def _read(path):
    """Args: path (str): a text file. Returns: str: its UTF-8 text."""
    with open(path, encoding='utf-8') as f:
        return f.read()


def load_index(repo=REPO):
    """The collections and models of the model index, in its order.

    Args:
        repo (str): the repository root.

    Returns:
        tuple[list[dict], list[dict]]: the collections (each with the
        metafile's path added as ``'metafile'``) and the models (each with
        its collection as ``'collection'``).
    """
    index = yaml.safe_load(_read(osp.join(repo, INDEX)))
    collections, models = [], []
    for metafile in index['Import']:
        meta = yaml.safe_load(_read(osp.join(repo, metafile)))
        by_name = {}
        for coll in meta['Collections']:
            coll = dict(coll, metafile=metafile)
            by_name[coll['Name']] = coll
            collections.append(coll)
        for model in meta['Models']:
            models.append(
                dict(model, collection=by_name[model['In Collection']]))
    return collections, models


def _signed(value, digits=1):
    """Args: value (float); digits (int). Returns: str: e.g. ``'−1.4'``,
    ``'+0.1'``, with a typographic minus."""
    return f'{value:+.{digits}f}'.replace('-', '−')


def _span(values, digits):
    """Args: values (list[float]); digits (int): decimals. Returns: str:
    ``'lo–hi'``, one figure where they agree, ``'—'`` for none."""
    if not values:
        return '—'
    lo, hi = f'{min(values):.{digits}f}', f'{max(values):.{digits}f}'
    return lo if lo == hi else f'{lo}–{hi}'


def _batched(zoo, prefix):
    """Args: zoo (dict): a model's ``Zoo``; prefix (str): e.g. ``'Speed'``.
    Returns: list[tuple[int, list]]: ``(batch, value)`` of its ``'<prefix>
    b<N>'`` keys, by batch size."""
    found = []
    for key, value in zoo.items():
        m = re.fullmatch(re.escape(prefix) + r' b(\d+)', key)
        if m:
            found.append((int(m.group(1)), value))
    return sorted(found)


def _at(batch, first):
    """Args: batch (int); first (bool): the first figure of its cell.
    Returns: str: ``' at batch N'`` unless it is the first at batch 1."""
    return '' if batch == 1 and first else f' at batch {batch}'


def _speed_cell(zoo):
    """Args: zoo (dict): a model's ``Zoo``. Returns: str: the speed ratios,
    median (q1–q3), of the classifier or of the backbone and the whole
    model."""
    whole = zoo.get('Whole model b1')
    parts = [
        f'{med:.2f} ({q1:.2f}–{q3:.2f})' + (' backbone' if whole else '') +
        _at(batch, i == 0)
        for i, (batch, (med, q1, q3)) in enumerate(_batched(zoo, 'Speed'))
    ]
    if whole:
        parts.append('{:.2f} ({:.2f}–{:.2f}) whole model'.format(*whole))
    return '; '.join(parts)


def _deployed_cell(zoo):
    """Args: zoo (dict): a model's ``Zoo``, whose ``Deployed b<N>`` are
    ``[onnxruntime, compile]``, a missing or null one not measured.
    Returns: str: onnxruntime / compile ratios of the backbone, by batch
    size, ``—`` for one not measured."""

    def ratio(values, k):
        value = values[k] if k < len(values) else None
        return '—' if value is None else f'{value:.2f}'

    return '; '.join(f'{ratio(v, 0)} / {ratio(v, 1)}' + _at(batch, i == 0)
                     for i, (batch, v) in enumerate(
                         _batched(zoo, 'Deployed'))) or '—'


def _flops(model, models):
    """The FLOPs a zoo row gives: the model's, or its stand-in's.

    Args:
        model (dict): a model of :func:`load_index`.
        models (dict[str, dict]): every model by name.

    Returns:
        int: FLOPs.

    Raises:
        KeyError: ``FLOPs of`` names no model, or no FLOPs are given.
    """
    source = model['Metadata']['Zoo'].get('FLOPs of', model['Name'])
    return models[source]['Metadata']['FLOPs']


def flops_cut(zoo):
    """Args: zoo (dict): a model's ``Zoo``. Returns: float | None: its FLOPs
    cut in %: the change given, else ``1 - η``."""
    if 'FLOPs change (%)' in zoo:
        return -zoo['FLOPs change (%)']
    if 'FLOPs ratio (η)' in zoo:
        return 100 * (1 - zoo['FLOPs ratio (η)'])
    return None


def _gflops_cell(model, models):
    """Args: model (dict); models (dict[str, dict]): every model by name.
    Returns: str: GFLOPs with the change, η and the note in brackets."""
    zoo = model['Metadata']['Zoo']
    notes = []
    if 'FLOPs ratio (η)' in zoo:
        notes.append(f'η {zoo["FLOPs ratio (η)"]:.3f}')
    if 'FLOPs change (%)' in zoo:
        notes.append(_signed(zoo['FLOPs change (%)']) + '%')
    text = ', '.join(notes)
    if 'FLOPs note' in zoo:
        text += f'; {zoo["FLOPs note"]}'
    cell = f'{_flops(model, models) / 1e9:g}'
    return f'{cell} ({text})' if text else cell


def _params_cell(model):
    """Args: model (dict). Returns: str: parameters in M, and their change."""
    zoo = model['Metadata']['Zoo']
    cell = f'{model["Metadata"]["Parameters"] / 1e6:g}'
    if 'Parameters change (%)' in zoo:
        cell += f' ({_signed(zoo["Parameters change (%)"])}%)'
    return cell


def page_label(repo, page):
    """Args: repo (str); page (str): a method page, relative to ``repo``.
    Returns: str: its title before the colon, e.g. ``'STViT and STViT-R'``."""
    title = _read(osp.join(repo, page)).splitlines()[0].lstrip('# ')
    return title.split(':')[0].strip()


def _link(target, where):
    """Args: target (str): a path relative to the repository; where (str):
    the file the link is in. Returns: str: the link's path."""
    return posixpath.relpath(target, posixpath.dirname(where) or '.')


def zoo_models(models):
    """Args: models (list[dict]): :func:`load_index`'s. Returns: list[dict]:
    the models with a ``Zoo`` row."""
    return [m for m in models if 'Zoo' in m.get('Metadata', {})]


def zoo_table(models, repo=REPO, where=ZOO_PAGE):
    """The model zoo, one row per zoo model.

    Args:
        models (list[dict]): :func:`load_index`'s models.
        repo (str): the repository root (for the pages' titles).
        where (str): the file the table goes in (links are relative to it).

    Returns:
        str: the Markdown table, ending with a newline.
    """
    by_name = {m['Name']: m for m in models}
    lines = [ZOO_HEAD, '|' + ' --- |' * 8]
    for model in zoo_models(models):
        zoo = model['Metadata']['Zoo']
        page = model['collection']['README']
        config = model['Config']
        lines.append(
            f'| {zoo["Row"]} | [{posixpath.basename(config)}]'
            f'({_link(config, where)}) | {_params_cell(model)} | '
            f'{_gflops_cell(model, by_name)} | {_speed_cell(zoo)} | '
            f'{_deployed_cell(zoo)} | {zoo.get("Paper", "—")} | '
            f'[{page_label(repo, page)}]({_link(page, where)}) |')
    return '\n'.join(lines) + '\n'


def read_rows(path):
    """Args: path (str): a CSV file. Returns: list[dict]: its rows, numbers
    as floats, empty cells as None."""
    rows = []
    with open(path, newline='', encoding='utf-8') as f:
        for row in csv.DictReader(f):
            for key, value in row.items():
                if value == '':
                    row[key] = None
                elif re.fullmatch(r'-?[\d.]+(e-?\d+)?', value):
                    row[key] = float(value)
            rows.append(row)
    return rows


def study_cell(names, rows):
    """The digits study's top-1 change of a method's short-table rows.

    Args:
        names (list[str]): the method's names in ``study.csv``.
        rows (list[dict]): :func:`read_rows` of ``study.csv``.

    Returns:
        str: ``'change (FLOPs ratio)'`` per row, in points against the
        host, or ``'—'``.

    Raises:
        ValueError: a name with no row in the short table.
    """
    host = next(r for r in rows if r['method'] == 'host')
    parts = []
    for name in names:
        mine = [r for r in rows if r['method'] == name and r['summary'] == 1]
        if not mine:
            raise ValueError(f'{STUDY_CSV} has no short-table row of {name}')
        parts += [f'{_signed(100 * (r["top1_mean"] - host["top1_mean"]))} '
                  f'({r["flops_ratio"]:.2f})' for r in mine]
    return ', '.join(parts) or '—'


def dense_cell(names, rows):
    """The dense study's changes of a method's fine-tuned rows.

    Args:
        names (list[str]): the method's names in ``dense.csv``.
        rows (list[dict]): :func:`read_rows` of ``dense.csv``.

    Returns:
        str: ``'metric change'`` per metric of each row, in points against
        the row's dense reference, or ``'—'``.

    Raises:
        ValueError: a name with no fine-tuned row.
    """
    parts = []
    for name in names:
        mine = [r for r in rows
                if r['method'] == name and r['setting'] == 'fine-tuned']
        if not mine:
            raise ValueError(f'{DENSE_CSV} has no fine-tuned row of {name}')
        for row in mine:
            ref = next(r for r in rows
                       if r['task'] == row['task'] and r['setting'] ==
                       'fine-tuned' and r['method'] == row['reference'])
            parts += [f'{label} {_signed(100 * (row[key] - ref[key]))}'
                      for key, label in DENSE_METRICS
                      if row[key] is not None]
    return ', '.join(parts) or '—'


def _method_of(model):
    """Args: model (dict): a zoo model. Returns: str: its summary row.

    Raises:
        ValueError: ``Method`` is missing where the collection has several
            summary rows, or names none of them.
    """
    methods = [s['Method'] for s in model['collection']['Summary']]
    method = model['Metadata']['Zoo'].get('Method')
    if method is None and len(methods) == 1:
        return methods[0]
    if method not in methods:
        raise ValueError(f'{model["Name"]}: Zoo.Method {method!r} is not '
                         f'one of {methods}')
    return method


def summary_table(collections, models, study_rows, dense_rows,
                  where=README):
    """The README's summary, one row per method.

    Args:
        collections (list[dict]), models (list[dict]): :func:`load_index`'s.
        study_rows (list[dict]): :func:`read_rows` of ``study.csv``.
        dense_rows (list[dict]): :func:`read_rows` of ``dense.csv``.
        where (str): the file the table goes in (links are relative to it).

    Returns:
        str: the Markdown table, ending with a newline.

    Raises:
        ValueError: a summary row without zoo models.
    """
    by_name = {m['Name']: m for m in models}
    lines = [SUMMARY_HEAD, '|' + ' --- |' * 8]
    for coll in collections:
        for entry in coll['Summary']:
            zoos = [m['Metadata']['Zoo'] for m in zoo_models(models)
                    if m['collection'] is coll and
                    _method_of(m) == entry['Method']]
            if not zoos:
                raise ValueError(f'{entry["Method"]} has no zoo model')
            cuts = [c for c in map(flops_cut, zoos) if c is not None]
            speeds = {1: [], 32: []}
            for zoo in zoos:
                for batch, ratio in _batched(zoo, 'Speed'):
                    if batch in speeds:
                        speeds[batch].append(ratio[0])
            quoted = by_name[entry['Paper figure of']]['Metadata']['Zoo']
            lines.append(
                f'| [{entry["Method"]}]({_link(coll["README"], where)}) | '
                f'{entry["Hosts"]} | {_span(cuts, 1)} | '
                f'{_span(speeds[1], 2)} | {_span(speeds[32], 2)} | '
                f'{study_cell(entry["Study"], study_rows)} | '
                f'{dense_cell(entry["Dense"], dense_rows)} | '
                f'{quoted["Row"].split(",")[0]}: {quoted["Paper"]} |')
    return '\n'.join(lines) + '\n'


def replace_block(text, name, table):
    """Put a table between a file's markers.

    Args:
        text (str): the file's text.
        name (str): the markers' name: ``<!-- NAME:start ... -->`` and
            ``<!-- NAME:end -->``, each on its own line.
        table (str): the new text between them, ending with a newline.

    Returns:
        str: ``text`` with the table in place.

    Raises:
        ValueError: the markers are missing or repeated.
    """
    pattern = re.compile(rf'(^<!-- {name}:start\b[^\n]*-->\n)(.*?)'
                         rf'(^<!-- {name}:end -->$)', re.S | re.M)
    found = pattern.findall(text)
    if len(found) != 1:
        raise ValueError(f'{len(found)} <!-- {name}:start/end --> pairs; '
                         'expected one')
    return pattern.sub(lambda m: m.group(1) + table + m.group(3), text)


def rendered(repo=REPO):
    """The files this tool writes, as they should read.

    Args:
        repo (str): the repository root.

    Returns:
        dict[str, str]: path relative to ``repo`` -> its full new text.
    """
    collections, models = load_index(repo)
    study_rows = read_rows(osp.join(repo, STUDY_CSV))
    dense_rows = read_rows(osp.join(repo, DENSE_CSV))
    tables = {
        ZOO_PAGE: ('zoo', zoo_table(models, repo)),
        README: ('summary', summary_table(collections, models, study_rows,
                                          dense_rows)),
    }
    return {
        path: replace_block(_read(osp.join(repo, path)), name, table)
        for path, (name, table) in tables.items()
    }


def stale(texts, repo=REPO):
    """Args: texts (dict[str, str]): :func:`rendered`'s; repo (str): the
    repository root. Returns: list[str]: the files whose text differs."""
    return [path for path, text in texts.items()
            if _read(osp.join(repo, path)) != text]


def main(argv=None):
    """Args: argv (list[str], optional): the command line. Returns: int:
    the exit status (1: ``--check`` found a stale file)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--check', action='store_true',
                        help='write nothing; exit 1 when a file is stale')
    args = parser.parse_args(argv)
    try:
        texts = rendered()
    except (ValueError, KeyError) as err:  # markers, names, CSV rows
        print(f'zoo_tables.py: {err}', file=sys.stderr)
        return 1
    bad = stale(texts)
    if args.check:
        for path in bad:
            print(f'{path} is stale: run python tools/misc/zoo_tables.py',
                  file=sys.stderr)
        return 1 if bad else 0
    for path in bad:
        with open(osp.join(REPO, path), 'w', encoding='utf-8') as f:
            f.write(texts[path])
        print(f'wrote {path}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
