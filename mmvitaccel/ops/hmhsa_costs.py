"""Closed-form FLOPs and parameters of MHSA and of hMHSA in the form that
runs (``docs/hmhsa_cffn_design.md``), in the convention of
:mod:`mmvitaccel.ops.flops`: what the measured counter reports for the same
module. Plain torch.
"""
from mmvitaccel.ops.flops import attention_flops, attention_params
from mmvitaccel.ops.hmhsa import check_even_heads, resolve_hmhsa_form

__all__ = ['mhsa_flops', 'hmhsa_flops', 'mhsa_params', 'hmhsa_params']


def mhsa_flops(n, c, n_kv=None):
    """Closed-form FLOPs (multiply-adds) of vanilla MHSA (paper Eq. 5),
    :func:`~mmvitaccel.ops.flops.attention_flops`.

    ``Q, K, V`` projections ``(n + 2 n_kv) C^2``, ``Q K^T`` and ``A V``
    ``2 n n_kv C``, ``Proj`` ``n C^2``; with ``n_kv = n`` this is
    ``4 N C^2 + 2 N^2 C``. Biases, scaling and softmax are free; the
    layer's LayerNorm is not part of the attention module.

    Args:
        n (int): Query tokens ``N``.
        c (int): Channels ``C``.
        n_kv (int, optional): Key/value tokens (spatially reduced in PVT);
            ``n`` by default.

    Returns:
        int: FLOPs of one image.
    """
    return attention_flops(n, c, n_kv)


def hmhsa_flops(n, c, h, n_kv=None, num_extra=0, kernel_size=3,
                form='auto', masked=False):
    """Closed-form FLOPs of hMHSA in the form that runs: the attention of
    :func:`~mmvitaccel.ops.flops.attention_flops` with ``d_qk = C / 2``,
    plus the hallucination.

    Every form: ``Q^`` ``n C^2 / 2``, ``K^`` ``n_kv C^2 / 2``, ``V``
    ``n_kv C^2``, ``Proj`` ``n C^2``, real scores ``n n_kv C / 2``,
    ``A V`` ``n n_kv C``. Then, with ``g = h / 2`` and ``d = C / h``:

    * ``'explicit'`` (paper Eq. 7): IHH on the maps
      ``k^2 n (n_kv - num_extra) g`` (the class-token column is a free
      element-wise product), CHH ``n n_kv g^2``; with ``n_kv = n`` and no
      extra token ``3 N C^2 + 3 N^2 C / 2 + 9 N^2 h / 2 + N^2 h^2 / 4``;
    * ``'fused'`` and ``'stacked'`` (:mod:`~mmvitaccel.ops.hmhsa_fused`):
      IHH on the keys ``k^2 (n_kv - num_extra) g d``, the IHH scores
      ``n n_kv g d``, CHH on those maps ``n n_kv g^2`` (the fused form
      folds a single CHH factor into the queries when ``g = 1``: no map
      product);
    * ``'auto'``: the form :func:`resolve_hmhsa_form` picks.

    The key-side forms have more FLOPs than the explicit one when
    ``k^2 (n_kv - num_extra) d / n + n_kv d > k^2 (n_kv - num_extra)``
    per map, about when ``d > k^2``: they trade a product for never
    filtering a map (``docs/hmhsa_cffn_design.md#forms``).

    Args:
        n (int): Query tokens.
        c (int): Channels.
        h (int): Heads (even).
        n_kv (int, optional): Key tokens; ``n`` by default.
        num_extra (int): Non-grid keys (class token).
        kernel_size (int): IHH filter side.
        form (str): One of :data:`~mmvitaccel.ops.hmhsa.HMHSA_FORMS`; ``'auto'`` (default)
            counts the form that :func:`hallucinated_attention` runs by
            default.
        masked (bool): The call has a mask (``'auto'`` then runs the
            explicit form).

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
    """Parameters of vanilla MHSA: ``4 C^2`` (+ ``4 C`` biases),
    :func:`~mmvitaccel.ops.flops.attention_params`.

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
