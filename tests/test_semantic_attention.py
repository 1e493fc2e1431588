"""Cross-attention and masked window Swin blocks (STViT layers)."""
import pickle

import pytest
import torch
from mmdet.models.backbones.swin import SwinBlock

from mmvitaccel.models.stvit import (CrossAttentionSwinBlock,
                                     MaskedWindowSwinBlock)
from mmvitaccel.ops import pad_to_multiple

from .tolerance import assert_equal, assert_rounding_close

DIMS = dict(embed_dims=32, num_heads=4, feedforward_channels=64)
#: float64 rounding through one block of DIMS on 7x7 windows: norms, qkv,
#: proj, fc1 (32 each), logits (d = 8), softmax and values (49 keys), fc2
BLOCK_TERMS = 5 * 32 + 8 + 2 * 49 + 64


def _swin_block(**kwargs):
    torch.manual_seed(0)
    block = SwinBlock(**DIMS, window_size=7, **kwargs)
    block.init_weights()
    with torch.no_grad():
        block.attn.w_msa.relative_position_bias_table.normal_()
    return block.eval()


def test_cross_block_loads_swin_weights_and_matches_self_attention():
    swin = _swin_block()
    cross = CrossAttentionSwinBlock(**DIMS).eval()
    cross.init_weights()  # the removed position table needs no init
    pickle.loads(pickle.dumps(cross))  # e.g. for torch.save(model)
    missing, unexpected = cross.load_state_dict(swin.state_dict(),
                                                strict=False)
    assert missing == []
    assert sorted(unexpected) == [
        'attn.w_msa.relative_position_bias_table',
        'attn.w_msa.relative_position_index'
    ]
    # with a zero position bias, self-attention over one 7x7 window is Swin
    with torch.no_grad():
        swin.attn.w_msa.relative_position_bias_table.zero_()
    swin.double()
    cross.double()
    x = torch.randn(3, 49, 32, dtype=torch.double)
    with torch.no_grad():
        ref = torch.cat([swin(x[i:i + 1], (7, 7)) for i in range(3)])
        out = cross(x, cross.key_values(x))
    assert_rounding_close(out, ref, BLOCK_TERMS)


def test_cross_block_ignores_masked_keys_and_trains():
    block = CrossAttentionSwinBlock(**DIMS).train()
    query = torch.randn(4, 9, 32)
    keys = torch.randn(4, 20, 32)
    valid = torch.rand(2, 20) > 0.3  # per window, repeated over 2 images
    valid[:, 0] = True
    noisy = keys.clone()
    noisy[~valid.repeat(2, 1)] = 1e3 * torch.randn(int((~valid).sum()) * 2,
                                                   32)
    block.eval()
    with torch.no_grad():  # bit-exact: masked keys get weight 0
        assert_equal(block(query, block.key_values(keys), valid),
                     block(query, block.key_values(noisy), valid))
    block.train()
    block(query, block.key_values(keys), valid).sum().backward()
    assert block.attn.w_msa.qkv.weight.grad[:32].abs().sum() > 0  # W_q
    assert block.attn.w_msa.qkv.weight.grad[32:].abs().sum() > 0  # W_kv
    assert block.ffn.layers[1].weight.grad.abs().sum() > 0


def test_masked_window_block_equals_swin_without_padding():
    swin = _swin_block()
    block = MaskedWindowSwinBlock(**DIMS, window_size=7).eval()
    block.load_state_dict(swin.state_dict())
    swin.double()
    block.double()
    x = torch.randn(2, 14, 21, 32, dtype=torch.double)
    with torch.no_grad():
        ref = swin(x.flatten(1, 2), (14, 21)).view(2, 14, 21, 32)
        out = block(x, torch.ones(14, 21, dtype=torch.bool))
    assert_rounding_close(out, ref, BLOCK_TERMS)


def test_masked_window_block_is_padding_invariant():
    block = MaskedWindowSwinBlock(**DIMS, window_size=7).eval()
    x, valid = pad_to_multiple(torch.randn(1, 10, 12, 32), 7)
    noisy = x.clone()
    noisy[:, ~valid] = 50 * torch.randn_like(noisy[:, ~valid])
    with torch.no_grad():
        a, b = block(x, valid), block(noisy, valid)
    assert_equal(a[:, valid], b[:, valid])  # the padding's weight is 0
    with pytest.raises(ValueError, match='no shifted windows'):
        MaskedWindowSwinBlock(**DIMS, shift=True)
