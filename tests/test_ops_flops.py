"""The closed-form FLOPs of ``mmvitaccel.ops.flops`` and the method formulas
built on them: on a dense layer every formula gives the same number, which
is what the counter measures; the validators and the masked-logit constant
have one home each."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from mmpretrain.models.backbones.vision_transformer import \
    TransformerEncoderLayer

import mmvitaccel.ops as ops
from mmvitaccel.ops import (attention_flops, attention_params,
                            CENTRE_POOLINGS, check_choice, check_init_mode,
                            check_pooling, ffn_flops, ffn_params,
                            hmhsa_flops, hmhsa_params, INIT_MODES,
                            layer_flops, layer_norm_flops, mhsa_flops,
                            mhsa_params, mlp_flops, pool_centres,
                            POOLING_MODES, vit_layer_flops, vit_layer_params)
from mmvitaccel.ops.attention import MASKED_LOGIT
from mmvitaccel.analysis.flops import count_flops, count_params

PROPS = settings(max_examples=40, deadline=None, database=None,
                 derandomize=True)

tokens = st.integers(1, 400)
widths = st.integers(1, 128)


@PROPS
@given(n=tokens, c=widths, ratio=st.integers(1, 8))
def test_dense_layer_formulas_agree(n, c, ratio):
    """One dense ViT layer by every formula: the shared one, the token
    pruning one, GLAD's (MLP ratio 4), hMHSA's plain attention plus cFFN's
    plain FFN plus two LayerNorms, and the polynomial the AS-ViT budget loss
    used before the formulas were folded."""
    F = ratio * c
    shared = vit_layer_flops(n, c, F)
    pieces = mhsa_flops(n, c) + ffn_flops(n, c, F) + 2 * layer_norm_flops(
        n, c)
    polynomial = (4 * c * c + 2 * c * F + 10 * c) * n + 2 * c * n * n
    assert shared == pieces == polynomial
    assert ops.vit_layer_flops is vit_layer_flops
    if ratio == 4:
        assert layer_flops(n, c) == shared
    # a float token count (AS-ViT's soft count) gives the same number
    soft = vit_layer_flops(torch.tensor([float(n)], dtype=torch.float64), c,
                           F)
    assert soft.item() == shared


@PROPS
@given(n=tokens, c=widths, kv=tokens)
def test_method_attentions_are_the_shared_one_with_other_widths(n, c, kv):
    """DGSSA is the attention with no query/key width, hMHSA (without its
    hallucination) the one with half of it, PVT's the one on fewer keys."""
    assert layer_flops(n, c, static=True) == vit_layer_flops(
        n, c, 4 * c, qk_dims=0) == \
        10 * n * c * c + n * n * c + 10 * n * c
    assert mhsa_flops(n, c, kv) == attention_flops(n, c, kv) == \
        (2 * n + 2 * kv) * c * c + 2 * n * kv * c
    c2 = 2 * c  # even, as hMHSA needs h | C with h even
    hallucination = 9 * n * kv * 1 + n * kv * 1  # h = 2: one map each
    assert hmhsa_flops(n, c2, 2, kv, form='explicit') == attention_flops(
        n, c2, kv, qk_dims=c) + hallucination
    assert hmhsa_params(c2, 2) == attention_params(c2, c) + 9 + 1
    assert mhsa_params(c) == attention_params(c) == 4 * c * c + 4 * c
    assert ffn_params(c, 4 * c) == 8 * c * c + 5 * c
    assert ffn_flops(n, c, 4 * c) == mlp_flops(n, c, 4 * c)


def test_vit_layer_formula_equals_the_counter():
    """The shared layer formula, LayerNorms included, is what count_flops
    measures on mmpretrain's ViT layer (and its parameters what it has)."""
    C, F, N = 48, 96, 17
    layer = TransformerEncoderLayer(embed_dims=C, num_heads=3,
                                    feedforward_channels=F)
    assert count_flops(layer, torch.randn(1, N, C)).total == \
        vit_layer_flops(N, C, F)
    assert count_params(layer) == vit_layer_params(C, F)


# --- one validator, one masked logit -----------------------------------------


@pytest.mark.parametrize('check, name, choices', [
    (check_init_mode, 'static attention init', INIT_MODES),
    (check_pooling, 'pooling', CENTRE_POOLINGS),
    (lambda v: pool_centres(torch.zeros(1, 4, 2), (2, 2), (1, 1), v),
     'pooling mode', POOLING_MODES),
    (lambda v: ops.GLAD(4, 2, 8, init=v), 'GLAD init', ('pool', 'random')),
    (lambda v: ops.masked_attention(*[torch.zeros(1, 1, 2, 2)] * 3, 1.,
                                    mode=v), 'mask mode', ops.MASK_MODES),
])
def test_validators_are_check_choice(check, name, choices):
    """Every option check gives check_choice's message: the parameter's
    name, the value and the allowed values."""
    with pytest.raises(ValueError) as shared:
        check_choice(name, 'bogus', choices)
    with pytest.raises(ValueError) as own:
        check('bogus')
    assert str(own.value) == str(shared.value)
    assert str(shared.value) == (f"unknown {name} 'bogus'; choose from "
                                 f'{tuple(choices)}')
    assert check_choice(name, choices[0], choices) == choices[0]


def test_one_masked_logit():
    """The old names are the shared constant, not copies of it."""
    from mmvitaccel.ops import token_pruning
    assert ops.MASK_VALUE == ops.MASKED_LOGIT == MASKED_LOGIT == -1e4
    assert token_pruning.MASKED_LOGIT == MASKED_LOGIT
    assert ops.check_choice is token_pruning.check_choice
