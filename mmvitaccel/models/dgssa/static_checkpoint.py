"""Host checkpoints for DGSSA (static attention) layers.

A DGSSA layer keeps the host's value and output projections and replaces
``softmax(Q K^T / sqrt(d_h) [+ B])`` by one learned logit matrix per head.
Loading a host checkpoint (DeiT, Swin) into it therefore:

* splits the fused ``qkv`` of every static layer: the V rows become ``v``,
  Q and K are dropped;
* keeps the static logits a checkpoint of ``tools/dgssa_init.py`` holds for
  the static layers, and drops the ones of other layers;
* for Swin, folds the relative position bias ``B`` of a static block into
  the logits it starts from (the table and its index are dropped);
* names the static logits the checkpoint lacks, to be initialised by
  ``static_init`` (``'dg'`` cannot be: its logits come from data).

:func:`static_attention_state_dict` does this for
``DGSSAVisionTransformer`` and ``DGSSASwinTransformer`` alike.
"""
import warnings
from collections import OrderedDict

import torch

from mmvitaccel.ops import relative_position_bias, relative_position_index

#: the note of a split ``qkv`` in ``load_report['dropped']``: ``{key}`` the
#: fused key, ``{v_key}`` where the V rows went
QK_NOTE = '{key}: Q and K dropped'


def fresh_static_init(mode):
    """The init of static logits made without data: ``'dg'`` needs the
    statistics that ``tools/dgssa_init.py`` writes into a checkpoint, so
    without one it falls back to ``'uniform'`` with a warning.

    Args:
        mode (str): a ``static_init`` mode.

    Returns:
        str: ``mode``, or ``'uniform'`` for ``'dg'``.
    """
    if mode == 'dg':
        warnings.warn("static_init='dg' takes the static logits from a "
                      'checkpoint written by tools/dgssa_init.py; none '
                      'given, so they start uniform')
        return 'uniform'
    return mode


def _folded_bias(table, window):
    """The bias ``(h, w^2, w^2)`` of a relative position table
    ``((2w - 1)^2, h)``, or None without a table of this window."""
    if table is None or table.shape[0] != (2 * window - 1)**2:
        return None
    return relative_position_bias(table, relative_position_index(window))


def static_attention_state_dict(state_dict, static_layers, static_init,
                                window=None, qk_note=QK_NOTE):
    """Turn a host state dict into the names of a model with DGSSA layers.

    Args:
        state_dict (dict): the host's weights in the model's module names.
        static_layers (dict[str, nn.Module]): ``{prefix: attention}`` of the
            static layers, in order; ``prefix`` ends with a dot (e.g.
            ``'layers.1.attn.'``, ``'stages.0.blocks.0.attn.w_msa.'``) and
            the module has ``embed_dims`` and ``static_logits``
            ``(h, n, n)``.
        static_init (str): the model's ``static_init``; ``'dg'`` needs the
            logits in the checkpoint.
        window (int | None): the Swin window side ``w``: each static block's
            ``relative_position_bias_table`` ``((2w - 1)^2, h)`` is folded
            into the bias of its fresh logits (zeros without one) and
            dropped with its ``relative_position_index``; None for a ViT
            (no tables, no bias).
        qk_note (str): the note of a split ``qkv``, formatted with ``key``
            and ``v_key``.

    Returns:
        tuple[dict, list[str], OrderedDict]: the converted state dict; the
        notes of what was dropped or folded; ``{static logits name: bias}``
        of the static layers whose logits the checkpoint lacks (``bias``
        ``(h, n, n)`` float for Swin, None for a ViT).

    Raises:
        ValueError: with ``static_init='dg'`` and logits missing from the
            checkpoint (or of another shape).
    """
    state_dict = dict(state_dict)
    notes, fresh = [], OrderedDict()
    own = {p + 'static_logits' for p in static_layers}
    for key in [k for k in state_dict if k.endswith('.static_logits')]:
        if key not in own:  # tools/dgssa_init.py writes every layer's
            del state_dict[key]
    for p, attn in static_layers.items():
        C = attn.embed_dims
        for kind in ('weight', 'bias'):
            qkv = state_dict.pop(p + f'qkv.{kind}', None)
            if qkv is not None:
                state_dict[p + f'v.{kind}'] = qkv[2 * C:]
                notes.append(
                    qk_note.format(key=f'{p}qkv.{kind}', v_key=f'{p}v.{kind}'))
        table = None
        if window is not None:
            table = state_dict.pop(p + 'relative_position_bias_table', None)
            state_dict.pop(p + 'relative_position_index', None)
        key = p + 'static_logits'
        shape = tuple(attn.static_logits.shape)
        if key in state_dict and tuple(state_dict[key].shape) == shape:
            continue
        if static_init == 'dg':
            raise ValueError(
                f"static_init='dg' needs the static logits {key} of shape "
                f'{shape} in the checkpoint: write them with '
                f'tools/dgssa_init.py, or choose another static_init')
        state_dict.pop(key, None)
        bias = None
        if window is not None:
            bias = _folded_bias(table, window)
            if bias is None:
                bias = torch.zeros(shape)
            else:
                notes.append(f'{p}relative_position_bias_table: folded into '
                             f'the static logits')
            bias = bias.float()
        fresh[key] = bias
    return state_dict, notes, fresh
