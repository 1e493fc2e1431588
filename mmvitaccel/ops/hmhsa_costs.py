"""Closed-form FLOPs and parameters of MHSA and of hMHSA in the form that
runs, in the convention of :mod:`mmvitaccel.ops.flops`.
"""
from mmvitaccel.ops.flops import attention_flops, attention_params
from mmvitaccel.ops.hmhsa import check_even_heads, resolve_hmhsa_form

__all__ = ['mhsa_flops', 'hmhsa_flops', 'mhsa_params', 'hmhsa_params']


def mhsa_flops(n, c, n_kv=None):
    """FLOPs of vanilla MHSA (paper Eq. 5): ``4 N C^2 + 2 N^2 C`` at
    ``n_kv = n``.

    Args:
        n (int): Query tokens ``N``.
        c (int): Channels ``C``.
        n_kv (int, optional): Key/value tokens; ``n`` by default.

    Returns:
        int: FLOPs of one image.
    """
    return attention_flops(n, c, n_kv)


def hmhsa_flops(n, c, h, n_kv=None, num_extra=0, kernel_size=3,
                form='auto', masked=False):
    """FLOPs of hMHSA in the form that runs: attention with ``d_qk = C / 2``
    plus the hallucination (``g = h / 2``, ``d = C / h``, ``e = num_extra``).

    ``'explicit'`` (Eq. 7): IHH ``k^2 n (n_kv - e) g``, CHH ``n n_kv g^2``.
    ``'fused'``/``'stacked'``: IHH on keys ``k^2 (n_kv - e) g d``, scores
    ``n n_kv g d``, CHH ``n n_kv g^2`` (none for fused at ``g = 1``).

    Args:
        n (int): Query tokens.
        c (int): Channels.
        h (int): Heads (even).
        n_kv (int, optional): Key tokens; ``n`` by default.
        num_extra (int): Non-grid keys (class token).
        kernel_size (int): IHH filter side.
        form (str): One of :data:`~mmvitaccel.ops.hmhsa.HMHSA_FORMS`;
            ``'auto'``: the form :func:`resolve_hmhsa_form` picks.
        masked (bool): The call has a mask.

    Returns:
        int: FLOPs of one image.
    """
    n_kv = n if n_kv is None else n_kv
    g = check_even_heads(h)
    form = resolve_hmhsa_form(form, g, masked)
    # Q^, K^ of C / 2 channels (C is a multiple of the even h)
    attn = attention_flops(n, c, n_kv, qk_dims=c // 2)
    if form != 'explicit':
        ihh = kernel_size**2 * (n_kv - num_extra) * (c // 2)  # on K^
        scores = n * n_kv * (c // 2)  # s Q_j K'_j^T, g maps of width d
        chh = 0 if form == 'fused' and g == 1 else n * n_kv * g * g
        return attn + ihh + scores + chh
    ihh = kernel_size**2 * n * (n_kv - num_extra) * g
    chh = n * n_kv * g * g
    return attn + ihh + chh


def mhsa_params(c, bias=True):
    """Parameters of vanilla MHSA: ``4 C^2`` (+ ``4 C`` biases).

    Args:
        c (int): Channels.
        bias (bool): Biases on ``qkv`` and ``Proj``.

    Returns:
        int: Parameter count.
    """
    return attention_params(c, bias=bias)


def hmhsa_params(c, h, bias=True, kernel_size=3):
    """Parameters of hMHSA: ``Q^, K^`` ``C^2 / 2`` each, ``V`` and ``Proj``
    ``C^2`` each, IHH ``k^2 h / 2``, CHH ``(h / 2)^2``.

    Args:
        c (int): Channels.
        h (int): Heads (even).
        bias (bool): Biases on the projections.
        kernel_size (int): IHH filter side.

    Returns:
        int: Parameter count.
    """
    g = check_even_heads(h)
    linear = attention_params(c, c // 2, bias)  # 3 C^2 (+ 3 C)
    return linear + kernel_size**2 * g + g * g
