"""Tests of the FLOP-counting convention (mmvitaccel.analysis.flops).

FLOPs = multiply-adds counted by mmengine's FlopAnalyzer (jit trace), with
this project's handle for ``aten::scaled_dot_product_attention``; layer norms
count ``5 * numel`` (mmengine's rough estimate), element-wise ops zero.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mmvitaccel  # noqa: F401
from mmvitaccel.analysis.flops import (average_flops, count_flops,
                                       count_params, sdpa_flop_jit)


class Attention(nn.Module):
    """Multi-head self-attention: qkv linear, attention, output projection.

    Args:
        dim (int): Channels ``C``.
        heads (int): Number of heads.
        sdpa (bool): Use ``F.scaled_dot_product_attention`` instead of the
            explicit ``softmax(q @ k^T * s) @ v``.
    """

    def __init__(self, dim, heads, sdpa):
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, mask=None):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (B, heads, N, C/heads)
        if self.sdpa:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            attn = q @ k.transpose(-2, -1) * q.shape[-1]**-0.5
            if mask is not None:
                attn = attn + mask
            out = attn.softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(B, N, C))


@pytest.mark.parametrize('B,N,C,heads', [(1, 197, 192, 3), (2, 50, 64, 4),
                                         (3, 17, 96, 1), (2, 64, 128, 8)])
def test_sdpa_equals_explicit_equals_formula(B, N, C, heads):
    x = torch.randn(B, N, C)
    explicit = count_flops(Attention(C, heads, sdpa=False), x)
    sdpa = count_flops(Attention(C, heads, sdpa=True), x)
    formula = B * (4 * N * C * C + 2 * N * N * C)
    assert explicit.total == sdpa.total == formula
    assert sdpa.by_operator['scaled_dot_product_attention'] == 2 * B * N**2 * C
    assert sdpa.unsupported_ops == {}


def test_sdpa_mask_does_not_change_count():
    B, N, C, heads = 2, 20, 32, 4
    x = torch.randn(B, N, C)
    mask = torch.randn(B, heads, N, N)
    plain = count_flops(Attention(C, heads, sdpa=True), x).total
    masked = count_flops(Attention(C, heads, sdpa=True), (x, mask)).total
    explicit = count_flops(Attention(C, heads, sdpa=False), (x, mask)).total
    assert plain == masked == explicit


class RawAttention(nn.Module):
    """Attention on given q, k, v (no projections), either form."""

    def __init__(self, sdpa, gqa=False):
        super().__init__()
        self.sdpa, self.gqa = sdpa, gqa

    def forward(self, q, k, v):
        if self.sdpa:  # enable_gqa: torch >= 2.5, named only where used
            gqa = dict(enable_gqa=True) if self.gqa else {}
            return F.scaled_dot_product_attention(q, k, v, **gqa)
        if self.gqa:
            rep = q.shape[-3] // k.shape[-3]
            k = k.repeat_interleave(rep, dim=-3)
            v = v.repeat_interleave(rep, dim=-3)
        return (q @ k.transpose(-2, -1)).softmax(-1) @ v


@pytest.mark.parametrize(
    'q_shape,k_shape,v_shape,gqa',
    [
        ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 6), False),  # Lq != Lk, E != Ev
        ((2, 4, 5, 8), (1, 4, 7, 8), (1, 4, 7, 8), False),  # k, v broadcast
        ((3, 5, 8), (3, 9, 8), (3, 9, 8), False),  # 3-d inputs
        pytest.param(  # grouped-query
            (2, 8, 5, 4), (2, 2, 7, 4), (2, 2, 7, 6), True,
            marks=pytest.mark.skipif(
                'enable_gqa' not in F.scaled_dot_product_attention.__doc__,
                reason='grouped-query SDPA (enable_gqa) needs torch >= 2.5')),
    ])
def test_sdpa_shapes(q_shape, k_shape, v_shape, gqa):
    inputs = (torch.randn(q_shape), torch.randn(k_shape), torch.randn(v_shape))
    sdpa = count_flops(RawAttention(True, gqa), inputs).total
    explicit = count_flops(RawAttention(False, gqa), inputs).total
    # q carries the full (broadcast) batch in these cases: (*B, Lq, E)
    batch_lq = 1
    for size in q_shape[:-1]:
        batch_lq *= size
    expected = batch_lq * k_shape[-2] * (q_shape[-1] + v_shape[-1])
    assert sdpa == explicit == expected


def test_sdpa_handle_is_registered_on_jit_node():
    # the handle reads the traced shapes: check it directly on a graph node
    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 7,
                                                   4), torch.randn(2, 3, 7, 6)
    graph, _ = torch.jit._get_trace_graph(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v), (q, k, v))
    node = [
        n for n in graph.nodes()
        if n.kind() == 'aten::scaled_dot_product_attention'
    ][0]
    assert sdpa_flop_jit(list(node.inputs()),
                         list(node.outputs())) == 2 * 3 * 5 * 7 * (4 + 6)


def test_multihead_attention_fast_path_is_counted():
    # eval + no_grad + batch_first self-attention takes PyTorch's fused
    # fast path (aten::_native_multi_head_attention) unless switched off
    B, L, E = 2, 10, 32
    mha = nn.MultiheadAttention(E, 4, batch_first=True)

    class Wrap(nn.Module):

        def __init__(self):
            super().__init__()
            self.mha = mha

        def forward(self, x, key_padding_mask=None):
            return self.mha(x, x, x, key_padding_mask=key_padding_mask)[0]

    x = torch.randn(B, L, E)
    expected = B * (4 * L * E * E + 2 * L * L * E)
    assert count_flops(Wrap(), x).total == expected
    # with a padding mask the slow path uses aten::baddbmm
    pad = torch.zeros(B, L, dtype=torch.bool)
    pad[:, -2:] = True
    res = count_flops(Wrap(), (x, pad))
    assert res.total == expected
    if hasattr(torch.backends, 'mha'):  # torch >= 2.2: the switch restored
        assert torch.backends.mha.get_fastpath_enabled()


def test_einsum_exact():

    class Einsum(nn.Module):

        def forward(self, a, b):
            return torch.einsum('bhqd,bhkd->bhqk', a, b)

    res = count_flops(Einsum(),
                      (torch.randn(2, 3, 5, 4), torch.randn(2, 3, 7, 4)))
    assert res.total == 2 * 3 * 5 * 7 * 4
    assert isinstance(res.total, int)


def deit_formula(img=224, patch=16, C=192, layers=12, ratio=4):
    """Closed-form FLOPs of mmpretrain's VisionTransformer (cls token, final
    norm, no pre-norm) under the convention."""
    P = (img // patch)**2
    N = P + 1  # cls token
    patch_embed = P * C * 3 * patch * patch  # conv: out positions x weight
    per_layer = (
        4 * N * C * C  # qkv + proj linears
        + 2 * N * N * C  # q @ k^T and attn @ v (SDPA handle)
        + 2 * ratio * N * C * C  # MLP fc1 + fc2
        + 2 * 5 * N * C)  # ln1, ln2: mmengine counts 5 * numel
    final_norm = 5 * N * C
    return patch_embed + layers * per_layer + final_norm


def test_deit_tiny_matches_closed_formula():
    from mmpretrain.models import VisionTransformer
    model = VisionTransformer(arch='deit-tiny', img_size=224, patch_size=16)
    model.train()
    res = count_flops(model, torch.randn(1, 3, 224, 224))
    assert res.total == deit_formula()
    assert res.unsupported_ops == {}
    assert set(res.by_operator) == {
        'conv', 'linear', 'layer_norm', 'scaled_dot_product_attention'
    }
    assert res.by_module['layers.0'] == res.by_module['layers.11']
    # eval mode was used and the training flag is restored
    assert model.training
    assert 'forward' not in vars(model)
    # batch 2 counts twice
    assert count_flops(model, torch.randn(2, 3, 224, 224)).total == \
        2 * deit_formula()
    C, N = 192, 197
    per_layer = 12 * C * C + 13 * C  # qkv, proj, fc1, fc2 + biases, 2 LNs
    assert count_params(model) == (3 * 16 * 16 * C + C) + C + N * C + \
        12 * per_layer + 2 * C  # patch conv, cls, pos embed, layers, norm


class TokenDropper(nn.Module):
    """An adaptive toy model: keeps the tokens whose mean is positive, then
    one linear layer. Its FLOPs depend on the content of the input."""

    def __init__(self, dim=16):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x, scale=1.0):
        keep = x[0].mean(-1) > 0  # (N, )
        return self.fc(x[:, keep] * scale)


def test_average_flops_over_inputs():
    model = TokenDropper(16)
    inputs = []
    for kept in (3, 5, 10):
        x = -torch.ones(1, 12, 16)
        x[:, :kept] = 1
        inputs.append(x)
    res = average_flops(model, inputs)
    assert res.per_input == [k * 16 * 16 for k in (3, 5, 10)]
    # integer counts: their sum and mean are exact in float64
    assert res.mean == 16 * 16 * 6
    assert res.by_module['fc'] == 16 * 16 * 6
    # dicts (as from a data preprocessor): 'inputs' positional, rest kwargs
    dict_res = average_flops(model,
                             [dict(inputs=x, scale=2.0) for x in inputs],
                             progress=True)
    assert dict_res.per_input == res.per_input
    # shared keyword arguments
    kw_res = average_flops(model, inputs, forward_kwargs=dict(scale=0.5))
    assert kw_res.mean == res.mean
    with pytest.raises(ValueError):
        average_flops(model, [])


def test_count_params_shared_once():
    lin = nn.Linear(4, 4)
    model = nn.Sequential(lin, nn.ReLU(), lin, nn.Linear(4, 2))
    assert count_params(model) == 20 + 10
    model[3].weight.requires_grad_(False)
    assert count_params(model, trainable_only=True) == 20 + 2


def test_tensor_outputs_are_flattened():
    # the tracer rejects None / non-tensor outputs; count_flops keeps tensors

    class Mixed(nn.Module):

        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x, data_samples=None):
            return dict(a=self.fc(x), b=None, c=[self.fc(x), 'meta'])

    res = count_flops(Mixed(), torch.randn(3, 8), dict(data_samples=[1, 2]))
    assert res.total == 2 * 3 * 8 * 4


TINY_VIT = """_base_ = 'mmpretrain::deit/deit-small_4xb256_in1k.py'
model = dict(
    backbone=dict(arch=dict(_delete_=True, embed_dims=64, num_layers=2,
                            num_heads=2, feedforward_channels=128),
                  img_size=64),
    head=dict(in_channels=64))
"""


def _get_flops_cli():
    import importlib.util
    import os.path as osp
    repo = osp.dirname(osp.dirname(osp.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(
        'get_flops_cli', osp.join(repo, 'tools', 'analysis', 'get_flops.py'))
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    return cli


def test_get_flops_cli_dummy(tmp_path, capsys):
    cfg = tmp_path / 'tiny_vit.py'
    cfg.write_text(TINY_VIT)
    rows = _get_flops_cli().main([str(cfg), '--shape', '64', '64'])
    out = capsys.readouterr().out
    assert 'GFLOPs' in out and 'backbone' in out
    (_, _, bb_params, bb_flops), (_, _, params, flops) = rows
    backbone = deit_formula(img=64, C=64, layers=2, ratio=2)
    assert bb_flops == backbone
    assert flops == backbone + 64 * 1000  # + the linear classifier head
    assert params == bb_params + 64 * 1000 + 1000


def test_get_flops_cli_real_images(tmp_path, tiny_data_dir, capsys):
    cfg = tmp_path / 'tiny_vit.py'
    cfg.write_text(TINY_VIT)
    rows = _get_flops_cli().main([
        str(cfg), '--tiny', '--num-images', '2', '--mode', 'predict',
        '--cfg-options', f'tiny.data_root={tiny_data_dir}'
    ])
    out = capsys.readouterr().out
    assert 'mean of 2 test images' in out
    assert rows[1][3] > 0


def test_einsum_counts_contractions_only():
    import torch.nn as nn
    from mmvitaccel.analysis.flops import count_flops

    class Einsums(nn.Module):

        def forward(self, a, b):
            moved = torch.einsum('bchw->bhwc', a)  # a permutation: free
            prod = torch.einsum('bij,bjk->bik', b, b)  # b*i*j*k
            return moved, prod

    a, b = torch.randn(2, 3, 4, 5), torch.randn(2, 6, 6)
    assert count_flops(Einsums(), (a, b)).total == 2 * 6 * 6 * 6
