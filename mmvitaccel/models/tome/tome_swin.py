"""ToMe in mmdet's Swin (also what the switch builds for mmseg's and
mmpretrain's Swins): each window merges ``r`` tokens for the block's
attention and MLP, and each token takes back its merged token's output, so
that every feature map keeps its size (``docs/tome.md#swin``)."""
import torch
import torch.utils.checkpoint as cp

from mmvitaccel.models.tome.tome_swin_stage import tome_swin_stage_forward
from mmvitaccel.models.utils import PretrainedMixin, SwinBase, swin_state_dict
from mmvitaccel.ops import pad_to_multiple, window_partition, window_reverse
from mmvitaccel.ops.tome import (bipartite_matching, merge_slots,
                                 merge_weighted, proportional_bias,
                                 unmerge_tokens)
from mmvitaccel.ops.tome_window import (map_merge_cap, merged_positions,
                                        pair_index, window_groups)
from mmvitaccel.registry import MODELS

__all__ = ['ToMeSwinTransformer', 'tome_swin_block_forward']

#: Swin's shift-mask logit between two shift regions (upstream's value)
SHIFT_MASK_LOGIT = -100.

#: ``'window'``: each window merges ``r`` tokens in every block;
#: ``'stage'``: each stage's map is merged once (:mod:`.tome_swin_stage`)
DESIGNS = ('window', 'stage')


def merged_window_attention(msa, x, size, pos, region=None, prop_attn=True):
    """An mmdet ``WindowMSA`` over merged windows.

    ``softmax(q k^T / sqrt(d) + B[p_i, p_j] + M[g_i, g_j] + log s_j) v``:
    ``B`` the relative position bias and ``M`` the shift mask, read at each
    merged token's position ``p`` and region ``g``.

    Args:
        msa (WindowMSA): the host's window attention.
        x (Tensor): merged windows ``(B * nW, n', C)``.
        size (Tensor): ``(B * nW, n', 1)`` tokens each one holds.
        pos (Tensor): ``(B * nW, n')`` window positions
            (:func:`~mmvitaccel.ops.tome_window.merged_positions`).
        region (Tensor, optional): ``(B * nW, n')`` shift regions; None
            without shift.
        prop_attn (bool): add ``log s``.

    Returns:
        Tensor: ``(B * nW, n', C)``.
    """
    Bw, n, C = x.shape
    qkv = msa.qkv(x).reshape(Bw, n, 3, msa.num_heads,
                             C // msa.num_heads).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    logits = (q * msa.scale) @ k.transpose(-2, -1)
    index = pair_index(msa.relative_position_index, pos)
    logits = logits + msa.relative_position_bias_table[index].permute(
        0, 3, 1, 2)
    if region is not None:
        apart = region[:, :, None] != region[:, None, :]
        logits = logits + (apart * SHIFT_MASK_LOGIT)[:, None].to(x.dtype)
    if prop_attn:
        logits = logits + proportional_bias(size).to(x.dtype)
    attn = msa.attn_drop(logits.softmax(-1))
    x = (attn @ v).transpose(1, 2).reshape(Bw, n, C)
    return msa.proj_drop(msa.proj(x))


def tome_swin_block_forward(block, x, hw_shape, r, prop_attn=True):
    """One mmdet ``SwinBlock`` whose windows merge ``r`` tokens each.

    ``m = match(LN1(x))`` in each window; ``x' = x + U(Attn(M(LN1 x)))``,
    ``out = x' + U(FFN(M(LN2 x')))``: ``M`` the size-weighted merge, ``U``
    gives each token its merged token's value. Where the merged windows
    hold at least the map's ``H W`` tokens (a padded small map), the MLP
    runs on the map unmerged.

    Args:
        block (SwinBlock): the host block.
        x (Tensor): ``(B, H * W, C)``.
        hw_shape (tuple[int, int]): ``(H, W)``.
        r (int): tokens each window merges; capped where a window has
            fewer A tokens with a partner of their group.
        prop_attn (bool): proportional attention.

    Returns:
        Tensor: ``(B, H * W, C)``.
    """
    shifted = block.attn
    w, s = shifted.window_size, shifted.shift_size
    B, L, C = x.shape
    H, W = (int(v) for v in hw_shape)  # (tensors when traced)
    Hp, Wp = -(-H // w) * w, -(-W // w) * w
    r = min(r, map_merge_cap((H, W), (Hp, Wp), w, s))
    if r <= 0:
        return block(x, hw_shape)
    # the MLP runs on the merged windows where they hold fewer tokens than
    # the map (padding: a small map's windows may hold more)
    merged_mlp = (Hp // w) * (Wp // w) * (w * w - r) < H * W
    groups = window_groups((H, W), (Hp, Wp), w, s, x.device).repeat(B, 1)

    def to_windows(t):
        t, _ = pad_to_multiple(t.view(B, H, W, C), w)
        if s:
            t = torch.roll(t, shifts=(-s, -s), dims=(1, 2))
        return window_partition(t, w)

    def from_windows(t):
        t = window_reverse(t, w, Hp, Wp)
        if s:
            t = torch.roll(t, shifts=(s, s), dims=(1, 2))
        return t[:, :H, :W].reshape(B, L, C)

    def inner(x):
        h = to_windows(block.norm1(x))
        merge = bipartite_matching(h, r, class_token=False, groups=groups)
        slot = merge_slots(merge, w * w)
        pos = merged_positions(merge, w * w)
        region = (groups // 2).gather(1, pos) if s else None
        merged, size = merge_weighted(merge, h)
        out = merged_window_attention(shifted.w_msa, merged, size, pos,
                                      region, prop_attn)
        x = x + shifted.drop(from_windows(unmerge_tokens(out, slot)))
        if not merged_mlp:  # the merged windows hold more than the map
            return block.ffn(block.norm2(x), identity=x)
        merged, _ = merge_weighted(merge, to_windows(block.norm2(x)))
        ffn = block.ffn
        out = ffn.gamma2(ffn.layers(merged))
        return x + ffn.dropout_layer(from_windows(unmerge_tokens(out, slot)))

    if block.with_cp and x.requires_grad:
        return cp.checkpoint(inner, x, use_reentrant=False)
    return inner(x)


def _per_stage(value, depths, name):
    """``value`` (an int, or one per stage) as one int per stage."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value] * len(depths)
    value = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(value) != len(depths) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for v in value):
        raise ValueError(f'{name} must be an int >= 0 or one per stage '
                         f'({len(depths)} stages), got {value!r}')
    return value


@MODELS.register_module()
class ToMeSwinTransformer(PretrainedMixin, SwinBase):
    """mmdet's Swin whose windows each merge ``r`` similar tokens in every
    block, unmerged after it (ToMe inside windows).

    Every window merges the same number of tokens, so the windows stay a
    rectangular batch; a token merges only within its shift region and
    padding. Each output map has the host's shape; with ``r = 0`` it is the
    host. There is no paper setting for Swin: ``r = 16`` merges about a
    third of each 7x7 window.

    Args:
        arch (str | None): ``'tiny'``, ``'small'``, ``'base'``; None keeps
            the explicit sizes.
        r (int | Sequence[int]): tokens each window merges, in every stage
            or one per stage (the window design).
        prop_attn (bool): proportional attention (``log s`` on the logits).
        design (str): one of :data:`DESIGNS`; ``'window'``, the default,
            held accuracy better at equal FLOPs (``docs/tome.md#swin``).
        stage_ratio (float | Sequence[float] | None): the stage design: the
            share of each stage's map merged at its start, at most 0.5; None:
            0.5 in stage 3 alone.
        **kwargs: the arguments of mmdet's ``SwinTransformer``.
    """

    def __init__(self, arch=None, r=16, prop_attn=True, design='window',
                 stage_ratio=None, **kwargs):
        if design not in DESIGNS:
            raise ValueError(f'design must be one of {DESIGNS}, got '
                             f'{design!r}')
        super().__init__(arch, **kwargs)
        self.prop_attn = prop_attn
        self.design = design
        self.set_r(r)
        depths = self.swin_cfg['depths']
        if stage_ratio is None:  # half of stage 3's map
            stage_ratio = [0.5 if i == 2 else 0. for i in range(len(depths))]
        if isinstance(stage_ratio, (int, float)):
            stage_ratio = [stage_ratio] * len(depths)
        stage_ratio = list(stage_ratio)
        if len(stage_ratio) != len(depths) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool)
                and 0 <= v <= 0.5 for v in stage_ratio):
            raise ValueError(
                f'stage_ratio must be a share in [0, 0.5] or one per stage '
                f'({len(depths)} stages), got {stage_ratio!r}')
        self.stage_ratio = stage_ratio

    #: reads a host (Swin) checkpoint in any supported layout
    host_state_dict = staticmethod(swin_state_dict)

    #: mmdet's Swin reads any ``init_cfg`` as a checkpoint
    host_init_ignores_init_cfg = True

    def set_r(self, r):
        """Set the tokens each window merges (an int, or one per stage)."""
        self.stage_r = _per_stage(r, self.swin_cfg['depths'], 'r')
        self.r = r

    def forward(self, x):
        """Upstream's forward, each block merging in its windows.

        Args:
            x (Tensor): images ``(B, C_in, H, W)``.

        Returns:
            tuple[Tensor]: NCHW maps of ``out_indices``, the host's shapes.
        """
        stage_design = self.design == 'stage'
        if not any(self.stage_ratio if stage_design else self.stage_r):
            return super().forward(x)
        x, hw_shape = self.patch_embed(x)
        if self.use_abs_pos_embed:
            x = x + self.absolute_pos_embed
        x = self.drop_after_pos(x)
        outs = []
        for i, (stage, r) in enumerate(zip(self.stages, self.stage_r)):
            if stage_design:
                x = tome_swin_stage_forward(stage, x, hw_shape,
                                            self.stage_ratio[i],
                                            self.prop_attn)
            else:
                for block in stage.blocks:
                    x = tome_swin_block_forward(block, x, hw_shape, r,
                                                self.prop_attn)
            out, out_hw = x, hw_shape
            if stage.downsample:
                x, hw_shape = stage.downsample(x, hw_shape)
            if i in self.out_indices:
                out = getattr(self, f'norm{i}')(out)
                outs.append(out.view(-1, *out_hw, self.num_features[i])
                            .permute(0, 3, 1, 2).contiguous())
        return tuple(outs)
