"""Host checkpoints for the hMHSA/cFFN backbones: PVTv2 in mmdet's names,
fused ``qkv`` split onto hMHSA layers (:func:`hallucinated_state_dict`)."""
from collections import OrderedDict

from mmvitaccel.ops import split_qkv_weights
from mmvitaccel.models.utils.checkpoint import _backbone_only, read_state_dict

__all__ = ['pvtv2_state_dict', 'hallucinated_state_dict']


def pvtv2_state_dict(checkpoint):
    """Backbone weights of a PVTv2 checkpoint in mmdet's names.

    Args:
        checkpoint (str | dict): A path/URL or a loaded checkpoint.

    Returns:
        OrderedDict: ``{name: tensor}``, no ``backbone.`` prefix.
    """
    state_dict = read_state_dict(checkpoint)
    if any(k.startswith(('block1.', 'patch_embed1.')) for k in state_dict):
        from mmdet.models.backbones.pvt import pvt_convert  # mmdet extra
        state_dict = pvt_convert(state_dict)  # official layout
    return _backbone_only(state_dict)


def hallucinated_state_dict(model, state_dict):
    """Split ``state_dict``'s fused ``qkv`` onto ``model``'s hMHSA layers.

    Args:
        model (nn.Module): A model whose hMHSA layers are
            :class:`~mmvitaccel.models.HallucinatedAttentionMixin`.
        state_dict (dict): Weights in the host's names (same module paths).

    Returns:
        OrderedDict: The adapted weights.
    """
    from mmvitaccel.models.hvit.hmhsa_attention import is_hallucinated
    out = OrderedDict(state_dict)
    for name, module in model.named_modules():
        if not is_hallucinated(module):
            continue
        p = f'{name}.' if name else ''
        if p + 'qkv.weight' in out:  # mmpretrain MultiheadAttention/WindowMSA
            w_key, b_key, out_proj = p + 'qkv.weight', p + 'qkv.bias', None
        elif p + 'attn.in_proj_weight' in out:  # nn.MultiheadAttention (PVT)
            w_key, b_key = p + 'attn.in_proj_weight', p + 'attn.in_proj_bias'
            out_proj = p + 'attn.out_proj.'
        else:
            continue
        if out[w_key].shape[0] != 3 * module.v.out_features:
            continue  # another width: left for the loader to report
        weight, bias = out.pop(w_key), out.pop(b_key, None)
        for key, value in split_qkv_weights(weight, bias).items():
            out[p + key] = value
        if out_proj is not None:
            for kind in ('weight', 'bias'):
                if out_proj + kind in out:
                    out[f'{p}proj.{kind}'] = out.pop(out_proj + kind)
    return out
