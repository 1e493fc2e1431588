"""hMHSA: ``softmax([A_r; A_h]) V``, ``A_r = Q^ K^T d**-0.5`` ``(B, h/2, N_q,
N_k)``, ``A_h = CHH(IHH(A_r))`` (IHH: depth-wise 3x3 over each row's key
grid; CHH: 1x1 across maps). Design: ``docs/hmhsa_cffn_design.md``."""
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
    """Raise ``ValueError`` unless ``num_heads`` is a positive even number.

    Args:
        num_heads (int): Head count ``h``.
        where (str): Which layer, for the message.

    Returns:
        int: ``h / 2``, the number of real maps.
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
        num_maps (int): ``h / 2`` real maps (one filter each, no bias).
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
            attn (Tensor): Real maps ``(B, h/2, N_q, N_k)``, ``N_k =
                num_extra + H_k * W_k``, grid keys in raster order.
            grid (tuple[int, int]): ``(H_k, W_k)``, the key grid.
            num_extra (int): Leading non-grid keys (centre tap only).

        Returns:
            Tensor: ``IHH(A_r)`` ``(B, h/2, N_q, N_k)``.
        """
        B, G, Nq, Nk = self.check_maps(attn, grid, num_extra)
        Hk, Wk = grid
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
        """Raise unless ``attn`` is ``(B, g, N_q, num_extra + H_k W_k)``;
        return its shape."""
        G, Nk = attn.shape[1], attn.shape[-1]
        if G != self.num_maps or Nk != num_extra + grid[0] * grid[1]:
            raise ValueError(
                f'IHH expects (B, {self.num_maps}, N_q, {num_extra} + '
                f'{grid[0]}*{grid[1]}) maps, got {tuple(attn.shape)}')
        return attn.shape

    def key_operator(self, grid, num_extra=0, dtype=None):
        """The filter on the keys as a cached sparse CSR ``(g N_k, g N_k)``.

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
            Tensor: ``CHH(attn)``, same shape.
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
        """``A_h = CHH(IHH(attn))`` ``(B, h/2, N_q, N_k)``; in eager CPU
        inference IHH is one sparse product ``M [A_j^T]_j``."""
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
    """Raise ``ValueError`` unless ``form`` is in :data:`HMHSA_FORMS`.

    Args:
        form (str): The requested form.
        option (str): The option's name, for the message.

    Returns:
        str: ``form``.
    """
    if form not in HMHSA_FORMS:
        raise ValueError(f'{option} must be one of {HMHSA_FORMS}, got '
                         f'{form!r}')
    return form


def resolve_hmhsa_form(form, num_maps, masked=False):
    """The form that runs; ``'auto'``: ``'explicit'`` with a mask, else
    ``'stacked'`` for ``g = 1``, else ``'fused'`` (measured:
    ``docs/hmhsa_cffn_design.md#forms``).

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
    """hMHSA: ``softmax([A_r; A_h] + bias + mask) V``, ``A_h = CHH(IHH(A_r))``.

    Args:
        q (Tensor): ``Q^`` ``(B, h/2, N_q, d)``.
        k (Tensor): ``K^`` ``(B, h/2, N_k, d)``.
        v (Tensor): ``V`` ``(B, h, N_k, d_v)`` (all heads).
        hallucination (AttentionHallucination): IHH + CHH.
        grid (tuple[int, int]): Key grid ``(H_k, W_k)``.
        num_extra (int): Leading non-grid keys (class token).
        scale (float, optional): Logit scale; ``d ** -0.5`` by default.
        bias (Tensor, optional): Added after the hallucination, e.g.
            ``(h, N_q, N_k)``.
        mask (Tensor, optional): bool or additive, broadcastable to
            ``(B, 1, N_q, N_k)``; zeroed at IHH's input, added before softmax.
        dropout_p (float): Attention dropout (pass 0 in eval mode).
        form (str): ``'explicit'``, ``'fused'``, ``'stacked'`` or ``'auto'``
            (:func:`resolve_hmhsa_form`).

    Returns:
        Tensor: ``(B, h, N_q, d_v)``.
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
    """Initial ``Q^, K^, V`` from a fused ``qkv``: ``Q^``/``K^`` the first
    ``h / 2`` heads' rows of ``Q``/``K``, ``V`` all of its rows.

    Args:
        qkv_weight (Tensor): ``(3C, C_in)``, rows ``[Q; K; V]``.
        qkv_bias (Tensor, optional): ``(3C,)``.

    Returns:
        dict: ``'q.weight'``, ``'k.weight'`` ``(C/2, C_in)``, ``'v.weight'``
        ``(C, C_in)``, and the biases when given.
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
