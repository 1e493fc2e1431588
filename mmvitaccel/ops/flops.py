"""Closed-form FLOPs and parameters of a ViT layer, in one convention.

The convention is that of the measured counter,
``mmvitaccel.analysis.flops.count_flops`` (mmengine's ``FlopAnalyzer`` with
our extra handles), so that a formula here equals what the counter reports
for the same module:

* one multiply-add is one FLOP; a linear layer on ``n`` tokens from ``c_in``
  to ``c_out`` channels costs ``n c_in c_out`` (:func:`linear_flops`), its
  bias nothing;
* a matrix product of attention costs its multiply-adds: the scores
  ``n n_kv d_qk``, the weighted sum ``n n_kv d_v``;
* softmax, scaling, masks, activations, dropout, additions cost nothing;
* a LayerNorm with affine parameters costs **5 per element**,
  ``5 n c`` (:data:`LAYER_NORM_FLOPS`, mmengine's ``layer_norm`` handle).

A pre-norm ViT layer on ``n`` tokens of ``C`` channels with an MLP of ``F``
hidden channels (:func:`vit_layer_flops`) is then

``qkv 3 n C^2 + Q K^T n^2 C + A V n^2 C + proj n C^2 + MLP 2 n C F +
LayerNorms 2 * 5 n C``,

and the method-specific formulas (SaiT/AS-ViT's token counts, DGSSA and
GLAD, hMHSA and cFFN) are compositions of these pieces.

Every function takes ints (exact) or float tensors (a soft token count
whose gradient is kept, AS-ViT's budget loss).

Plain torch: no registry, no OpenMMLab imports.
"""

__all__ = [
    'LAYER_NORM_FLOPS', 'linear_flops', 'layer_norm_flops', 'attention_flops',
    'mlp_flops', 'vit_layer_flops', 'attention_params', 'mlp_params',
    'vit_layer_params'
]

#: FLOPs per element of an affine LayerNorm (mmengine's ``layer_norm``
#: handle, which ``count_flops`` uses)
LAYER_NORM_FLOPS = 5


def linear_flops(tokens, in_dims, out_dims):
    """A linear map of ``tokens`` tokens: ``n c_in c_out`` (bias free).

    Args:
        tokens (int | Tensor): ``n``.
        in_dims (int): ``c_in``.
        out_dims (int): ``c_out``.

    Returns:
        int | Tensor: FLOPs, the type of ``tokens``.
    """
    return tokens * in_dims * out_dims


def layer_norm_flops(tokens, dims):
    """An affine LayerNorm over ``dims`` channels: ``5 n c``.

    Args:
        tokens (int | Tensor): ``n``.
        dims (int): ``c``.

    Returns:
        int | Tensor: FLOPs.
    """
    return LAYER_NORM_FLOPS * tokens * dims


def attention_flops(tokens, dims, kv_tokens=None, qk_dims=None):
    """Multi-head attention without its norm: projections, scores,
    weighted sum.

    ``Q`` ``n C d_qk``, ``K`` ``n_kv C d_qk``, ``V`` ``n_kv C^2``, ``Proj``
    ``n C^2``, ``Q K^T`` ``n n_kv d_qk``, ``A V`` ``n n_kv C``. With
    ``n_kv = n`` and ``d_qk = C``: ``4 n C^2 + 2 n^2 C``. ``d_qk`` is the
    total query/key width over the heads: ``C / 2`` for hMHSA's real maps,
    0 for DGSSA's static attention (no ``Q``, ``K`` or scores).

    Args:
        tokens (int | Tensor): query tokens ``n``.
        dims (int): channels ``C`` (input, value and output).
        kv_tokens (int | Tensor, optional): key/value tokens ``n_kv``
            (spatially reduced in PVT); ``n`` by default.
        qk_dims (int, optional): ``d_qk``; ``C`` by default.

    Returns:
        int | Tensor: FLOPs.
    """
    kv = tokens if kv_tokens is None else kv_tokens
    qk = dims if qk_dims is None else qk_dims
    projections = (linear_flops(tokens, dims, qk) + linear_flops(kv, dims, qk)
                   + linear_flops(kv, dims, dims) +
                   linear_flops(tokens, dims, dims))
    scores = tokens * kv * qk
    weighted_sum = tokens * kv * dims
    return projections + scores + weighted_sum


def mlp_flops(tokens, dims, hidden):
    """The two linear layers of a transformer MLP: ``2 n C F``.

    Args:
        tokens (int | Tensor): ``n``.
        dims (int): ``C``.
        hidden (int): ``F`` (``m C`` with MLP ratio ``m``).

    Returns:
        int | Tensor: FLOPs.
    """
    return linear_flops(tokens, dims, hidden) + linear_flops(
        tokens, hidden, dims)


def vit_layer_flops(tokens, embed_dims, feedforward_channels, qk_dims=None):
    """One pre-norm ViT layer: two LayerNorms, attention and MLP.

    ``(4 C^2 + 2 C F + 10 C) n + 2 C n^2`` with ``d_qk = C``; DGSSA
    (``qk_dims=0``) ``(2 C^2 + 2 C F + 10 C) n + C n^2``.

    Args:
        tokens (int | Tensor): ``n``, class token included (a float tensor
            keeps the gradient of a soft token count).
        embed_dims (int): ``C``.
        feedforward_channels (int): ``F``.
        qk_dims (int, optional): see :func:`attention_flops`.

    Returns:
        int | Tensor: FLOPs, the type of ``tokens``.
    """
    C = embed_dims
    return (2 * layer_norm_flops(tokens, C) +
            attention_flops(tokens, C, qk_dims=qk_dims) +
            mlp_flops(tokens, C, feedforward_channels))


def attention_params(dims, qk_dims=None, bias=True):
    """Parameters of :func:`attention_flops`' attention:
    ``2 C d_qk + 2 C^2`` (+ ``2 d_qk + 2 C`` biases).

    Args:
        dims (int): ``C``.
        qk_dims (int, optional): ``d_qk``; ``C`` by default.
        bias (bool): biases on the projections.

    Returns:
        int: parameter count.
    """
    qk = dims if qk_dims is None else qk_dims
    weights = 2 * dims * qk + 2 * dims * dims
    return weights + (2 * qk + 2 * dims if bias else 0)


def mlp_params(dims, hidden, bias=True):
    """Parameters of a transformer MLP: ``2 C F`` (+ ``F + C`` biases).

    Args:
        dims (int): ``C``.
        hidden (int): ``F``.
        bias (bool): biases on both layers.

    Returns:
        int: parameter count.
    """
    return 2 * dims * hidden + (hidden + dims if bias else 0)


def vit_layer_params(embed_dims, feedforward_channels, qk_dims=None,
                     bias=True):
    """Parameters of :func:`vit_layer_flops`' layer: attention, MLP and two
    affine LayerNorms (``2 C`` each).

    Args:
        embed_dims (int): ``C``.
        feedforward_channels (int): ``F``.
        qk_dims (int, optional): see :func:`attention_flops`.
        bias (bool): biases on the linear layers.

    Returns:
        int: parameter count.
    """
    C = embed_dims
    return (attention_params(C, qk_dims, bias) +
            mlp_params(C, feedforward_channels, bias) + 2 * 2 * C)
