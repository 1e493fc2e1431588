"""Closed-form FLOPs and parameters of a ViT layer, in the convention of
``mmvitaccel.analysis.flops.count_flops``: a multiply-add is one FLOP;
biases, softmax, scaling, masks and activations are free; an affine
LayerNorm costs ``5 n c``. A pre-norm ViT layer: ``qkv 3 n C^2 + Q K^T
n^2 C + A V n^2 C + proj n C^2 + MLP 2 n C F + LayerNorms 10 n C``.
Ints give exact counts; float tensors keep a gradient (AS-ViT's budget).
"""

__all__ = [
    'LAYER_NORM_FLOPS', 'linear_flops', 'layer_norm_flops', 'attention_flops',
    'mlp_flops', 'vit_layer_flops', 'attention_params', 'mlp_params',
    'vit_layer_params'
]

#: FLOPs per element of an affine LayerNorm (mmengine's ``layer_norm``)
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
    """Attention without its norm: ``Q`` ``n C d_qk``, ``K`` ``n_kv C
    d_qk``, ``V`` ``n_kv C^2``, ``Proj`` ``n C^2``, ``Q K^T`` ``n n_kv
    d_qk``, ``A V`` ``n n_kv C``; ``d_qk = C / 2`` in hMHSA, 0 in DGSSA.

    Args:
        tokens (int | Tensor): query tokens ``n``.
        dims (int): channels ``C`` (input, value and output).
        kv_tokens (int | Tensor, optional): ``n_kv``; ``n`` by default.
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
    """One pre-norm ViT layer: ``(4 C^2 + 2 C F + 10 C) n + 2 C n^2``.

    Args:
        tokens (int | Tensor): ``n``, class token included.
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
    """Parameters of the attention: ``2 C d_qk + 2 C^2`` (+ biases).

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
    """Parameters of a ViT layer: attention, MLP, two LayerNorms (``2 C``).

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
