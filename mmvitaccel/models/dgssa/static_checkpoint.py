"""Host (DeiT, Swin) checkpoints for DGSSA layers: ``qkv`` -> ``v``, Swin's
relative position bias folded into the fresh static logits."""
import warnings
from collections import OrderedDict

import torch

from mmvitaccel.ops import relative_position_bias, relative_position_index

#: the note of a split ``qkv`` (``{key}``, ``{v_key}``)
QK_NOTE = '{key}: Q and K dropped'


def fresh_static_init(mode):
    """Static logit init without data: ``'dg'`` -> ``'uniform'``, warned.

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
    """Bias ``(h, w^2, w^2)`` of a table ``((2w - 1)^2, h)``, or None."""
    if table is None or table.shape[0] != (2 * window - 1)**2:
        return None
    return relative_position_bias(table, relative_position_index(window))


def static_attention_state_dict(state_dict, static_layers, static_init,
                                window=None, qk_note=QK_NOTE):
    """Turn a host state dict into the names of a model with DGSSA layers.

    Args:
        state_dict (dict): the host's weights in the model's module names.
        static_layers (dict[str, nn.Module]): ``{prefix: attention}`` of the
            static layers, e.g. ``'layers.1.attn.'``.
        static_init (str): the model's ``static_init``.
        window (int | None): Swin's window ``w`` (bias tables folded); None
            for a ViT.
        qk_note (str): the note of a split ``qkv``.

    Returns:
        tuple[dict, list[str], OrderedDict]: the state dict, notes, and
        ``{static logits name: bias (h, n, n) | None}`` of missing logits.

    Raises:
        ValueError: ``static_init='dg'`` with logits missing or misshapen.
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
