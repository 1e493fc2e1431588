"""The stage design of ToMe in Swin (``docs/tome.md#swin``): a stage's map
is merged once at its start, its blocks run on the merged tokens with
attention among tokens that share a window, and the map is unmerged at the
stage's end (the alternative to :mod:`.tome_swin`'s windows)."""
from mmvitaccel.ops.tome import (bipartite_matching, merge_slots,
                                 merge_weighted, proportional_bias,
                                 unmerge_tokens)
from mmvitaccel.ops.tome_window import (block_cells, clamped_relative_index,
                                        merged_positions, shared_cells)

__all__ = ['stage_merge_count', 'tome_swin_stage_forward']


def stage_merge_count(ratio, num_tokens):
    """Tokens merged from a map of ``L`` tokens: ``min(round(ratio L),
    L // 2)``."""
    return min(round(ratio * num_tokens), num_tokens // 2)


def _merged_block(block, x, size, slot, pos, hw_shape, prop_attn):
    """One mmdet ``SwinBlock`` on merged tokens ``(B, L', C)``.

    ``softmax(q k^T / sqrt(d) + B[clamp(p_i - p_j)] + log s_j)``, over the
    tokens ``j`` that share a cell of the block with ``i``; ``p`` the
    position each merged token sits at.
    """
    shifted = block.attn
    msa = shifted.w_msa
    w, s = shifted.window_size, shifted.shift_size
    B, n, C = x.shape
    cells, num_cells = block_cells(hw_shape, w, s, x.device)
    allowed = shared_cells(cells, num_cells, slot, n)
    identity = x
    qkv = msa.qkv(block.norm1(x)).reshape(
        B, n, 3, msa.num_heads, C // msa.num_heads).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    logits = (q * msa.scale) @ k.transpose(-2, -1)
    index = clamped_relative_index(pos, hw_shape[1], w)
    logits = logits + msa.relative_position_bias_table[index].permute(
        0, 3, 1, 2)
    if prop_attn:
        logits = logits + proportional_bias(size).to(x.dtype)
    logits = logits.masked_fill(~allowed[:, None], float('-inf'))
    attn = msa.attn_drop(logits.softmax(-1))
    out = (attn @ v).transpose(1, 2).reshape(B, n, C)
    x = identity + shifted.drop(msa.proj_drop(msa.proj(out)))
    return block.ffn(block.norm2(x), identity=x)


def tome_swin_stage_forward(stage, x, hw_shape, ratio, prop_attn=True):
    """One mmdet ``SwinBlockSequence`` on its map merged once.

    ``m = match(x)`` over the whole map (bipartite soft matching, A the even
    positions); ``x' = M(x)``, the blocks on ``x'``; the stage's output is
    ``U(x')``: each position takes its merged token's value.

    Args:
        stage (SwinBlockSequence): the host stage.
        x (Tensor): ``(B, H * W, C)``.
        hw_shape (tuple[int, int]): ``(H, W)``.
        ratio (float): the share of the map's tokens merged
            (:func:`stage_merge_count`).
        prop_attn (bool): proportional attention.

    Returns:
        Tensor: ``(B, H * W, C)``, before the stage's downsampling.
    """
    hw_shape = tuple(int(v) for v in hw_shape)  # (tensors when traced)
    L = hw_shape[0] * hw_shape[1]
    r = stage_merge_count(ratio, L)
    if r <= 0:
        for block in stage.blocks:
            x = block(x, hw_shape)
        return x
    merge = bipartite_matching(x, r, class_token=False)
    slot = merge_slots(merge, L)
    pos = merged_positions(merge, L)
    x, size = merge_weighted(merge, x)
    for block in stage.blocks:
        x = _merged_block(block, x, size, slot, pos, hw_shape, prop_attn)
    return unmerge_tokens(x, slot)
