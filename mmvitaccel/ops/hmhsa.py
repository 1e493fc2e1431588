"""hMHSA: attention maps hallucinated from half of the heads.

Paper: *Vision Transformer with Attention Map Hallucination and FFN
Compaction* (no public code; the equations we adopt are in
``docs/hmhsa_cffn_design.md#hmhsa``). With ``h`` heads of ``d = C / h``
channels:

1. ``Q^, K^`` are projected to ``C / 2`` only, giving ``h / 2`` *real*
   pre-softmax maps ``A_r = Q^ K^T * d ** -0.5`` ``(B, h/2, N_q, N_k)``;
2. IHH (intra-head hallucination): the key axis of every map row is viewed
   as the key grid ``H_k x W_k`` and a depth-wise 3x3 convolution (one
   filter per real map) is applied on it, so each hallucinated score
   mixes the scores of a key and its 8 spatial neighbours;
3. CHH (cross-head hallucination): a 1x1 convolution across the ``h / 2``
   maps gives the hallucinated maps ``A_h`` ``(B, h/2, N_q, N_k)``;
4. ``A = [A_r; A_h]`` (``h`` maps), softmax over keys, times the full
   ``V`` ``(B, h, N_k, d)``, then the output projection (done by the
   caller).

Keys that are not on the grid (a class token) come first on the key axis
and are treated as isolated grid points: the 3x3 filter sees zeros around
them, so only its centre tap applies (``num_extra`` below).

Neither convolution has a bias: a bias adds the same value to every key of
a map row, which the softmax cancels, so it could never learn.

Everything here is plain torch; the OpenMMLab layers in
``mmvitaccel.models.hvit.hmhsa_attention`` use it.
"""
import torch
import torch.nn as nn

from mmvitaccel.ops.attention import attention_logits
from mmvitaccel.ops.hmhsa_fused import (cross_head_mix,
                                        fused_hallucinated_attention,
                                        key_filter_operator, maps_times_values,
                                        sparse_filter_applies,
                                        stacked_hallucinated_attention)
from mmvitaccel.ops.inference_cache import weight_cache

__all__ = [
    'check_even_heads', 'IntraHeadHallucination', 'CrossHeadHallucination',
    'AttentionHallucination', 'HMHSA_FORMS', 'check_hmhsa_form',
    'resolve_hmhsa_form', 'hallucinated_attention', 'split_qkv_weights'
]


def check_even_heads(num_heads, where=''):
    """Raise a clear error unless ``num_heads`` is a positive even number.

    Args:
        num_heads (int): Head count ``h`` of an attention layer.
        where (str): Which layer, for the message (e.g. ``'stage 2'``).

    Returns:
        int: ``h / 2``, the number of real (and of hallucinated) maps.
    """
    if not isinstance(num_heads, int) or num_heads < 2 or num_heads % 2:
        place = f' ({where})' if where else ''
        raise ValueError(
            f'hMHSA needs an even number of heads (h/2 real maps + h/2 '
            f'hallucinated ones), got num_heads={num_heads}{place}; use '
            f'plain attention there or change the head count')
    return num_heads // 2


class IntraHeadHallucination(nn.Module):
    """IHH: a depth-wise 3x3 convolution over the key grid of each map.

    Args:
        num_maps (int): ``h / 2``, the number of real maps (one 3x3 filter
            each, no bias).
        kernel_size (int): Side of the filter; 3 in the paper.
    """

    def __init__(self, num_maps, kernel_size=3):
        super().__init__()
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f'kernel_size must be odd, got {kernel_size}')
        self.num_maps = num_maps
        self.conv = nn.Conv2d(
            num_maps,
            num_maps,
            kernel_size,
            padding=kernel_size // 2,
            groups=num_maps,
            bias=False)

    def forward(self, attn, grid, num_extra=0):
        """Apply the filter to every row of every real map.

        Args:
            attn (Tensor): Real maps ``A_r`` ``(B, h/2, N_q, N_k)``, with
                ``N_k = num_extra + H_k * W_k``, grid keys in raster order.
            grid (tuple[int, int]): ``(H_k, W_k)``, the key grid.
            num_extra (int): Leading keys that are not on the grid (class
                token); only the filter's centre tap applies to them.

        Returns:
            Tensor: ``(B, h/2, N_q, N_k)``, ``IHH(A_r)``.
        """
        B, G, Nq, Nk = self.check_maps(attn, grid, num_extra)
        Hk, Wk = grid
        # view the key axis of each row as the key grid:
        # (B, h/2, N_q, H*W) -> (B * N_q, h/2, H, W), filter per map
        maps = attn[..., num_extra:].transpose(1, 2).reshape(B * Nq, G, Hk, Wk)
        maps = self.conv(maps).reshape(B, Nq, G, Hk * Wk).transpose(1, 2)
        if not num_extra:
            return maps
        centre = self.conv.weight[:, 0, self.conv.kernel_size[0] // 2,
                                  self.conv.kernel_size[1] // 2]
        extra = attn[..., :num_extra] * centre.view(1, G, 1, 1)
        return torch.cat((extra, maps), dim=-1)

    def check_maps(self, attn, grid, num_extra=0):
        """Raise unless ``attn`` is ``(B, g, N_q, num_extra + H_k W_k)``.

        Returns:
            torch.Size: ``attn``'s shape.
        """
        G, Nk = attn.shape[1], attn.shape[-1]
        if G != self.num_maps or Nk != num_extra + grid[0] * grid[1]:
            raise ValueError(
                f'IHH expects (B, {self.num_maps}, N_q, {num_extra} + '
                f'{grid[0]}*{grid[1]}) maps, got {tuple(attn.shape)}')
        return attn.shape

    def key_operator(self, grid, num_extra=0, dtype=None):
        """The filter on the keys as a sparse matrix
        (:func:`~mmvitaccel.ops.hmhsa_fused.key_filter_operator`), kept
        between calls until the weight, the grid or the dtype changes.

        Args:
            grid (tuple[int, int]): ``(H_k, W_k)``.
            num_extra (int): Leading non-grid keys.
            dtype (torch.dtype, optional): Of the keys; the weight's default.

        Returns:
            Tensor: sparse CSR ``(g N_k, g N_k)``.
        """
        weight = self.conv.weight
        dtype = dtype or weight.dtype
        return weight_cache(
            self, '_key_operator', [weight],
            lambda: key_filter_operator(weight.detach().to(dtype),
                                        tuple(grid), num_extra),
            extra=(tuple(grid), num_extra, dtype))


class CrossHeadHallucination(nn.Module):
    """CHH: a 1x1 convolution (no bias) that mixes the ``h / 2`` maps.

    Args:
        num_maps (int): ``h / 2``, input and output maps.
    """

    def __init__(self, num_maps):
        super().__init__()
        self.conv = nn.Conv2d(num_maps, num_maps, 1, bias=False)

    def forward(self, attn):
        """
        Args:
            attn (Tensor): ``(B, h/2, N_q, N_k)``.

        Returns:
            Tensor: ``(B, h/2, N_q, N_k)``, ``CHH(attn)``.
        """
        return cross_head_mix(self.conv.weight.view(self.conv.out_channels,
                                                    -1), attn)


class AttentionHallucination(nn.Module):
    """``A_h = CHH(IHH(A_r))``: the hallucinated half of the maps.

    Args:
        num_heads (int): ``h``, even; the module holds ``h / 2`` filters.
        kernel_size (int): IHH filter side, 3 in the paper.
    """

    def __init__(self, num_heads, kernel_size=3):
        super().__init__()
        num_maps = check_even_heads(num_heads)
        self.ihh = IntraHeadHallucination(num_maps, kernel_size)
        self.chh = CrossHeadHallucination(num_maps)

    def forward(self, attn, grid, num_extra=0):
        """
        Args:
            attn (Tensor): Real maps ``(B, h/2, N_q, N_k)``.
            grid (tuple[int, int]): Key grid ``(H_k, W_k)``.
            num_extra (int): Leading non-grid keys.

        Returns:
            Tensor: ``[A_r; A_h]`` ``(B, h, N_q, N_k)``.
        """
        return torch.cat((attn, self.hallucinate(attn, grid, num_extra)),
                         dim=1)

    def hallucinate(self, attn, grid, num_extra=0):
        """``A_h = CHH(IHH(attn))`` alone, ``(B, h/2, N_q, N_k)``.

        In eager inference on the CPU (float32/64), IHH runs as one sparse
        product with the filter operator ``M`` of the key grid
        (:meth:`IntraHeadHallucination.key_operator`):
        ``IHH_j(A_j) = A_j M_j^T``, computed as ``M [A_j^T]_j`` on the maps
        laid out as ``(g N_k, B N_q)``, and CHH as one product on that
        layout. The map convolution, over ``B N_q`` images of ``H_k x W_k``,
        is what made the explicit form slow (design notes). Training,
        tracing and capture run the convolution.
        """
        if not sparse_filter_applies(attn):
            return self.chh(self.ihh(attn, grid, num_extra))
        B, G, Nq, Nk = self.ihh.check_maps(attn, grid, num_extra)
        op = self.ihh.key_operator(grid, num_extra, attn.dtype)
        rows = attn.permute(1, 3, 0, 2).reshape(G * Nk, B * Nq)
        maps = torch.sparse.mm(op, rows).view(G, -1)  # IHH, [g, N_k B N_q]
        maps = self.chh.conv.weight.view(G, G).to(attn.dtype) @ maps  # CHH
        return maps.view(G, Nk, B, Nq).permute(2, 0, 3, 1)


#: the forms of :func:`hallucinated_attention`
HMHSA_FORMS = ('explicit', 'fused', 'stacked', 'auto')


def check_hmhsa_form(form, option='hmhsa_form'):
    """Raise a clear error unless ``form`` is one of :data:`HMHSA_FORMS`.

    Args:
        form (str): The requested form.
        option (str): The name of the option, for the message.

    Returns:
        str: ``form``.
    """
    if form not in HMHSA_FORMS:
        raise ValueError(f'{option} must be one of {HMHSA_FORMS}, got '
                         f'{form!r}')
    return form


def resolve_hmhsa_form(form, num_maps, masked=False):
    """The form that runs: ``form`` itself, or for ``'auto'`` the faster
    one for this layer.

    The rule comes from interleaved measurements of the attention alone on
    the hosts' shapes at batch 1 and 32
    (``tools/analysis/benchmark_hmhsa_forms.py``,
    ``docs/hmhsa_cffn_design.md#forms``). Without a mask the two forms with
    IHH on the keys beat the explicit one on every shape but PVTv2-b1's last
    stage at batch 1 (by 0.05 ms). Between them, the stacked form won where
    there is a single map (``g = 1``, PVTv2-b1's stage 2: CHH is one factor
    and one product over the stacked keys beats two fused-kernel calls),
    the fused form at batch 32 on DeiT-S and Swin-T's stages 2 and 4, with
    the rest within a few percent. With a mask (Swin's shifted windows) the
    key-side forms must gate every key's neighbours tap by tap, and the
    explicit form was as fast or faster (up to 3x). So ``'auto'`` runs
    ``'explicit'`` with a mask, else ``'stacked'`` for ``g = 1`` and
    ``'fused'`` otherwise.

    Args:
        form (str): One of :data:`HMHSA_FORMS`.
        num_maps (int): ``g = h / 2``.
        masked (bool): Whether the call has a mask.

    Returns:
        str: ``'explicit'``, ``'fused'`` or ``'stacked'``.
    """
    check_hmhsa_form(form, 'form')
    if form != 'auto':
        return form
    if masked:
        return 'explicit'
    return 'stacked' if num_maps == 1 else 'fused'


def hallucinated_attention(q,
                           k,
                           v,
                           hallucination,
                           grid,
                           num_extra=0,
                           scale=None,
                           bias=None,
                           mask=None,
                           dropout_p=0.0,
                           form='auto'):
    """hMHSA attention: real maps, hallucination, softmax, times ``V``.

    Args:
        q (Tensor): ``Q^`` ``(B, h/2, N_q, d)``.
        k (Tensor): ``K^`` ``(B, h/2, N_k, d)``.
        v (Tensor): ``V`` ``(B, h, N_k, d_v)`` (all heads).
        hallucination (AttentionHallucination): IHH + CHH.
        grid (tuple[int, int]): Key grid ``(H_k, W_k)``.
        num_extra (int): Leading non-grid keys (class token).
        scale (float, optional): Logit scale; ``d ** -0.5`` by default.
        bias (Tensor, optional): Added to all ``h`` maps after the
            hallucination, e.g. Swin's relative position bias ``(h, N_q,
            N_k)`` (broadcastable to ``(B, h, N_q, N_k)``).
        mask (Tensor, optional): bool (True where allowed) or additive (0
            where allowed, negative where not), broadcastable to
            ``(B, 1, N_q, N_k)``. Forbidden scores are zeroed in the input
            of IHH, so that they never reach their neighbours' hallucinated
            scores (e.g. across Swin's shifted regions), and the mask is
            added to all ``h`` maps before the softmax.
        dropout_p (float): Attention dropout (pass 0 in eval mode).
        form (str): ``'explicit'``: IHH and CHH on the maps (the
            paper's description); ``'fused'`` and ``'stacked'``: the same
            function with IHH on the keys, the real heads in
            ``scaled_dot_product_attention`` or all maps in one product
            and one softmax (:mod:`~mmvitaccel.ops.hmhsa_fused`; a mask
            must then be a region mask, as Swin's); ``'auto'`` (default):
            per shape, the faster (:func:`resolve_hmhsa_form`).

    Returns:
        Tensor: ``softmax([A_r; A_h] + bias + mask) @ V``
        ``(B, h, N_q, d_v)``, ``A_h = CHH(IHH(A_r))``.
    """
    if scale is None:
        scale = q.shape[-1]**-0.5
    if 2 * q.shape[1] != v.shape[1]:
        raise ValueError(f'Q^ has {q.shape[1]} heads, V {v.shape[1]}; hMHSA '
                         f'needs V with twice the heads of Q^')
    form = resolve_hmhsa_form(form, q.shape[1], mask is not None)
    if form != 'explicit':
        run = fused_hallucinated_attention if form == 'fused' else \
            stacked_hallucinated_attention
        return run(q, k, v, hallucination, grid, num_extra, scale, bias, mask,
                   dropout_p)
    attn = attention_logits(q, k, scale)  # A_r = Q^ K^T / sqrt(d)
    if mask is not None:
        attn_in = attn.masked_fill(
            ~mask if mask.dtype == torch.bool else mask < 0, 0.)
    else:
        attn_in = attn
    # A = [A_r; A_h], A_h = CHH(IHH(A_r))
    attn = torch.cat(
        (attn, hallucination.hallucinate(attn_in, grid, num_extra)), dim=1)
    return maps_times_values(attn, v, bias, mask, dropout_p)


def split_qkv_weights(qkv_weight, qkv_bias=None):
    """Initial ``Q^, K^, V`` projections from a fused upstream ``qkv``.

    ``Q^``/``K^`` take the rows of the first ``h / 2`` heads of ``Q``/``K``
    (``C / 2`` rows each), ``V`` keeps all its rows, so the real maps of a
    converted layer equal the first half of the pretrained maps.

    Args:
        qkv_weight (Tensor): ``(3C, C_in)``, rows ``[Q; K; V]``.
        qkv_bias (Tensor, optional): ``(3C,)``.

    Returns:
        dict: ``{'q.weight', 'k.weight', 'v.weight'}`` (``(C/2, C_in)``,
        ``(C/2, C_in)``, ``(C, C_in)``) and the biases when given.
    """
    C = qkv_weight.shape[0] // 3
    half = C // 2
    out = {
        'q.weight': qkv_weight[:half],
        'k.weight': qkv_weight[C:C + half],
        'v.weight': qkv_weight[2 * C:]
    }
    if qkv_bias is not None:
        out.update({
            'q.bias': qkv_bias[:half],
            'k.bias': qkv_bias[C:C + half],
            'v.bias': qkv_bias[2 * C:]
        })
    return {k: v.clone() for k, v in out.items()}
