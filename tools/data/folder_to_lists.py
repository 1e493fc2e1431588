"""Write ImageNet-style annotation lists for a class-folder dataset.

mmpretrain's ``CustomDataset`` (used by the hvit_* fine-tuning and
Tiny-ImageNet configs) reads ``ROOT/meta/<split>.txt``, one
``<path relative to ROOT/<split>> <label>`` per line. This tool writes them
for a dataset laid out as ``ROOT/<split>/<class>/**/<image>``; labels are
the positions of the class folders of the first split in sorted order
(also written to ``ROOT/meta/classes.txt``).

``--tinyimagenet`` reads the official Tiny-ImageNet-200 download as it
is: ``train/<wnid>/images/*.JPEG`` and a flat ``val/images/`` labelled by
``val/val_annotations.txt``; classes follow ``wnids.txt`` sorted.

    python tools/data/folder_to_lists.py data/stanford_dogs train val
    python tools/data/folder_to_lists.py data/tiny-imagenet-200 train val \
        --tinyimagenet
"""
import argparse
import os
import os.path as osp

IMAGE_EXTS = ('.jpg', '.jpeg', '.png', '.bmp', '.ppm', '.pgm', '.tif',
              '.tiff', '.webp')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('root', help='dataset folder')
    parser.add_argument('splits', nargs='+', help='split folders, e.g. '
                        'train val (classes come from the first)')
    parser.add_argument('--tinyimagenet', action='store_true',
                        help='official Tiny-ImageNet-200 layout')
    return parser.parse_args(argv)


def _images(folder):
    for dirpath, _, files in sorted(os.walk(folder)):
        for name in sorted(files):
            if name.lower().endswith(IMAGE_EXTS):
                yield osp.join(dirpath, name)


def folder_lines(root, split, classes):
    """``<class>/.../<image> <label>`` lines of ``root/split``."""
    lines = []
    base = osp.join(root, split)
    for label, name in enumerate(classes):
        for path in _images(osp.join(base, name)):
            lines.append(f'{osp.relpath(path, base)} {label}')
    return lines


def tinyimagenet_val_lines(root, split, classes):
    """Lines of Tiny-ImageNet's flat val split from val_annotations.txt."""
    index = {name: i for i, name in enumerate(classes)}
    lines = []
    with open(osp.join(root, split, 'val_annotations.txt')) as f:
        for row in f:
            if row.strip():
                image, wnid = row.split('\t')[:2]
                lines.append(f'images/{image} {index[wnid]}')
    return lines


def main(argv=None):
    args = parse_args(argv)
    first = osp.join(args.root, args.splits[0])
    if args.tinyimagenet:
        with open(osp.join(args.root, 'wnids.txt')) as f:
            classes = sorted(w.strip() for w in f if w.strip())
    else:
        classes = sorted(d for d in os.listdir(first)
                         if osp.isdir(osp.join(first, d)))
    if not classes:
        raise ValueError(f'no class folders in {first}')
    os.makedirs(osp.join(args.root, 'meta'), exist_ok=True)
    with open(osp.join(args.root, 'meta', 'classes.txt'), 'w') as f:
        f.write('\n'.join(classes) + '\n')
    for split in args.splits:
        flat = args.tinyimagenet and osp.isfile(
            osp.join(args.root, split, 'val_annotations.txt'))
        lines = (tinyimagenet_val_lines if flat else folder_lines)(
            args.root, split, classes)
        with open(osp.join(args.root, 'meta', f'{split}.txt'), 'w') as f:
            f.write('\n'.join(lines) + '\n')
        print(f'{split}: {len(lines)} images, {len(classes)} classes')


if __name__ == '__main__':
    main()
