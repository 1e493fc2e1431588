"""The study's outputs: the CSV (:data:`FIELDS`), its Markdown tables and
the accuracy plots."""
import csv
import os
import os.path as osp

__all__ = ['FIELDS', 'choose_summary', 'markdown_table', 'plot_tradeoff',
           'read_csv', 'write_csv']

#: The CSV's columns. ``flops_per_image``: ``'test mean'`` where the cost
#: depends on the image (``mflops`` is then the mean over the test split and
#: the seeds), else ``'fixed'``; ``summary``: 1 for the rows of the short
#: table (docs/study.md's), see :func:`choose_summary`; ``max_grad_norm``: a
#: trained method's largest gradient norm of any step of any seed (before
#: clipping; empty for the host and the training-free rows).
FIELDS = ('method', 'setting', 'params', 'mflops', 'flops_ratio',
          'top1_mean', 'top1_std', 'num_seeds', 'speed_ratio',
          'speed_ratio_q1', 'speed_ratio_q3', 'flops_per_image', 'summary',
          'max_grad_norm')
_INTS = ('params', 'num_seeds', 'summary')
_OPTIONAL = ('max_grad_norm', )
_TEXT = ('method', 'setting', 'flops_per_image')


def write_csv(rows, path):
    """The rows' :data:`FIELDS` as CSV."""
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    with open(path, 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, extrasaction='ignore')
        writer.writeheader()
        for row in rows:
            row = {'flops_per_image': 'fixed', 'summary': 1,
                   'max_grad_norm': None, **row}
            writer.writerow({
                k: f'{row[k]:.6g}' if isinstance(row[k], float) else
                '' if row[k] is None else row[k]
                for k in FIELDS
            })


def read_csv(path):
    """The rows of a :func:`write_csv` file, numbers as numbers."""
    rows = []
    with open(path, newline='') as f:
        for row in csv.DictReader(f):
            # CSVs written before these columns: fixed costs, all summarised
            row.setdefault('flops_per_image', 'fixed')
            row.setdefault('summary', '1')
            row.setdefault('max_grad_norm', '')
            for k in FIELDS:
                if k in _OPTIONAL and row[k] == '':
                    row[k] = None
                elif k not in _TEXT:
                    row[k] = int(row[k]) if k in _INTS else float(row[k])
            rows.append(row)
    return rows


def choose_summary(rows, preferences):
    """Mark the rows of the short table (``summary``).

    Every row is in it, except where a method states a preference between
    two of its settings (``preferences[method] = dict(setting=FASTER,
    over=REFERENCE, within=POINTS)``, e.g. AS-ViT's batch-mean inference
    over its padded one): the preferred setting stands for the method if it
    is faster than the reference and its top-1 is within ``within`` of the
    reference's (both as fractions); otherwise the reference does.

    Args:
        rows (list[dict]): measured rows (``speed_ratio``, ``top1_mean``).
        preferences (dict[str, dict]): method name -> preference.

    Returns:
        list[dict]: the rows, with ``summary`` set.
    """
    for row in rows:
        row['summary'] = 1
    for method, pref in preferences.items():
        by_setting = {r['setting']: r for r in rows
                      if r['method'] == method}
        faster = by_setting.get(pref['setting'])
        reference = by_setting.get(pref['over'])
        if faster is None or reference is None:
            continue
        keep = faster['speed_ratio'] > reference['speed_ratio'] and \
            faster['top1_mean'] >= reference['top1_mean'] - pref['within']
        (reference if keep else faster)['summary'] = 0
    return rows


def markdown_table(rows, references=True):
    """The rows as a Markdown table (top-1 in %, mean ± std over seeds).

    Args:
        rows (list[dict]): :func:`read_csv` rows (or the command's).
        references (bool): the whole table; False: the short one, without
            the training-free references (methods named ``'<scorer>
            pruning'``) and the rows :func:`choose_summary` left out. The
            host is always included.

    Returns:
        str: the table, one line per row, ending with a newline; ``*``
        marks the FLOPs that are a mean over the test split (and seeds).
    """
    lines = ['| method | setting | MFLOPs (ratio) | speed ratio, batch 32 '
             '(q1–q3) | top-1 % | seeds |',
             '| --- | --- | --- | --- | --- | --- |']
    for r in rows:
        if not references and (r['method'].endswith(' pruning') or
                               not r.get('summary', 1)):
            continue
        mean = '*' if r.get('flops_per_image') == 'test mean' else ''
        top1 = f'{100 * r["top1_mean"]:.1f}'
        if r['num_seeds'] > 1:
            top1 += f' ± {100 * r["top1_std"]:.1f}'
        lines.append(
            f'| {r["method"]} | {r["setting"]} | {r["mflops"]:.2f}{mean} '
            f'({r["flops_ratio"]:.2f}) | {r["speed_ratio"]:.2f} '
            f'({r["speed_ratio_q1"]:.2f}–{r["speed_ratio_q3"]:.2f}) | '
            f'{top1} | {r["num_seeds"]} |')
    return '\n'.join(lines) + '\n'


def plot_tradeoff(rows, path, x='mflops',
                  xlabel='MFLOPs per image'):
    """Top-1 (mean, with the seed std as error bars) against ``x``, one
    line per method, the host as a black square; a method's colour and
    marker pair is its own (ten colours, then the next marker)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4.5))
    methods = [m for m in dict.fromkeys(r['method'] for r in rows)
               if m != 'host']
    colours = plt.get_cmap('tab10').colors
    markers = 'oDv^P'
    for i, method in enumerate(methods):
        pts = sorted((r for r in rows if r['method'] == method),
                     key=lambda r: r[x])
        ax.errorbar([r[x] for r in pts], [r['top1_mean'] for r in pts],
                    yerr=[r['top1_std'] for r in pts],
                    marker=markers[i // len(colours) % len(markers)],
                    color=colours[i % len(colours)], capsize=2,
                    label=method)
    for r in rows:
        if r['method'] == 'host':
            ax.plot(r[x], r['top1_mean'], 's', color='k', label='host')
    ax.set_xlabel(xlabel)
    ax.set_ylabel('top-1 (test split)')
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
