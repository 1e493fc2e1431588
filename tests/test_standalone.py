"""The repository stands alone: nothing it ships points at a file outside it.

A user of the repository has neither the papers' notes kept beside it during
development nor anybody's home or work directory. Every tracked file (code,
configs, tools, docs, README, setup files, CI) is scanned for references to
such files and for absolute paths; a failure lists ``file:line`` and what was
found. Pointers from the package into ``docs/<page>.md#<anchor>`` must land
on a heading of that page.

Only this file and ``tests/test_docs.py`` (whose ``OUTSIDE`` tuple names the
same patterns as test data) are exempt.
"""
import os.path as osp
import re
import subprocess

import pytest

from .test_docs import _slugs
from .utils import REPO

#: the files whose job is to name the forbidden patterns
EXEMPT = ('tests/test_standalone.py', 'tests/test_docs.py')

#: references to files a user of the repository does not have
OUTSIDE = [
    ('the development notes on the papers', re.compile(r'NOTES\.md')),
    ('a folder beside the repository', re.compile(r'\.\./shared')),
    ('the papers folder', re.compile(r'shared/papers')),
    # an absolute path: not the tail of a URL or of a longer relative path
    ('an absolute path',
     re.compile(r'(?<![\w.:/~-])/(?:work|home|tmp|root|Users|mnt)/')),
    ('an absolute path', re.compile(r'(?<![\w.:/~-])/tmp\b')),
]

#: ``docs/<page>.md#<anchor>`` in code, configs or docs
DOC_POINTER = re.compile(r'(?<![\w./-])docs/([\w-]+\.md)#([\w-]+)')


def _tracked():
    """Returns: list[str]: the repository's tracked files (relative paths)
    that are text, except :data:`EXEMPT`."""
    out = subprocess.run(['git', 'ls-files', '-z'], cwd=REPO, check=True,
                         capture_output=True).stdout.decode()
    files = []
    for rel in out.split('\0'):
        if not rel or rel in EXEMPT or not osp.isfile(osp.join(REPO, rel)):
            continue
        with open(osp.join(REPO, rel), 'rb') as f:
            if b'\0' in f.read(8192):  # binary
                continue
        files.append(rel)
    return files


def _lines(rel, root=REPO):
    """Args: rel (str): a text file relative to ``root``; root (str).
    Yields: tuple: ``(line number, line)``."""
    with open(osp.join(root, rel), encoding='utf-8', errors='replace') as f:
        yield from enumerate(f, 1)


def outside_references(files, root=REPO):
    """Every reference to a file outside the repository.

    Args:
        files (list[str]): paths relative to ``root``.
        root (str): the folder they are in (the repository).

    Returns:
        list[str]: ``'file:line: what (text)'``, one per hit.
    """
    hits = []
    for rel in files:
        for number, line in _lines(rel, root):
            for what, pattern in OUTSIDE:
                match = pattern.search(line)
                if match:
                    hits.append(f'{rel}:{number}: {what} '
                                f'({match.group(0)!r}): {line.strip()}')
                    break
    return hits


def test_scanner_catches_each_pattern(tmp_path):
    bad = [
        'see NOTES.md', 'in ../shared/papers/x.txt', 'shared/papers/a.txt',
        'from /work/main/x', 'at /home/user/ckpt.pth', 'writes /tmp/x',
        'TMPDIR=/tmp', '"/root/data"'
    ]
    good = [
        'https://example.org/home/page', 'docs/hmhsa_cffn_design.md#cffn',
        'data/tiny/coco', 'a tmp_path fixture', 'mmdet/.mim/configs/x.py'
    ]
    for i, text in enumerate(bad + good):
        (tmp_path / f'{i}.txt').write_text(text + '\n')
    hits = outside_references([f'{i}.txt' for i in range(len(bad + good))],
                              str(tmp_path))
    assert [h.split(':')[0] for h in hits] == [
        f'{i}.txt' for i in range(len(bad))
    ], hits


def test_nothing_points_outside_the_repository():
    hits = outside_references(_tracked())
    assert not hits, ('files point outside the repository (write what they '
                      'need into docs/ and point there):\n' + '\n'.join(hits))


def test_doc_anchors_in_code_resolve():
    bad = []
    for rel in _tracked():
        for number, line in _lines(rel):
            for page, anchor in DOC_POINTER.findall(line):
                path = osp.join(REPO, 'docs', page)
                if not osp.exists(path):
                    bad.append(f'{rel}:{number}: docs/{page} does not exist')
                    continue
                with open(path, encoding='utf-8') as f:
                    if anchor not in _slugs(f.read()):
                        bad.append(f'{rel}:{number}: docs/{page} has no '
                                   f'heading #{anchor}')
    assert not bad, '\n'.join(bad)


@pytest.mark.parametrize('page', ['dgssa_glad', 'hmhsa_cffn'])
def test_design_pages_are_linked(page):
    design = f'{page}_design.md'
    assert osp.exists(osp.join(REPO, 'docs', design)), f'docs/{design}'
    with open(osp.join(REPO, 'README.md'), encoding='utf-8') as f:
        assert f'(docs/{design})' in f.read(), f'README does not link {design}'
    with open(osp.join(REPO, 'docs', f'{page}.md'), encoding='utf-8') as f:
        assert f'({design}' in f.read(), (
            f'docs/{page}.md does not link {design}')
