"""Per-layer pieces of a token-pruned ViT forward: the layer step, the token
bookkeeping (:class:`PruningState`) and :class:`PrunedTokens`."""
from typing import NamedTuple

import torch
import torch.nn.functional as F

from mmvitaccel.ops import (attention_logits, batch_mean_keep_mask,
                            batch_mean_kept_index, check_choice, gather_tokens,
                            masked_attention, masked_softmax, pad_kept_tokens,
                            restore_tokens, sdpa_mask)
from mmvitaccel.models.utils.vit import embed_tokens, run_layers

__all__ = ['PrunedTokens', 'PruningState', 'layer_forward', 'ATTN_ROWS',
           'tokens_and_last_attention']


class PrunedTokens(NamedTuple):
    """A pruned token sequence and what restores the grid.

    Attributes:
        tokens (Tensor): ``(B, 1 + K, C)`` class token and current tokens.
        index (Tensor): ``(B, K)`` their patch positions.
        alive (Tensor): ``(B, K)`` bool, False for pruned tokens and padding.
        dropped (Tensor): ``(B, N, C)`` each position's features when pruned.
        hw (tuple[int, int]): the patch grid.
    """
    tokens: torch.Tensor
    index: torch.Tensor
    alive: torch.Tensor
    dropped: torch.Tensor
    hw: tuple

    def restore(self):
        """The full grid ``(B, C, H, W)``, pruned positions as dropped."""
        grid = restore_tokens(self.dropped, self.tokens[:, 1:], self.index,
                              self.alive)
        return grid.transpose(1, 2).reshape(grid.shape[0], -1, *self.hw)


#: what :func:`layer_forward` returns of the attention map
ATTN_ROWS = ('all', 'cls')


def layer_forward(layer, x, policy=None, need_attn=False, mode='logits',
                  training=False, attn_rows='all', policy_grad='secant'):
    """One upstream ViT layer with a policy in its softmax and/or its map.

    ``x' = x + gamma1(Proj(A V))``, ``A = softmax(Q K^T / sqrt(d))`` masked
    by ``policy``; ``out = FFN(ln2(x'), identity=x')``. ``attn_rows='cls'``
    with ``mode='logits'`` runs fused and computes only the class row
    ``A_0 = softmax(q_0 K^T / sqrt(d))``.

    Args:
        layer (TransformerEncoderLayer): an upstream layer.
        x (Tensor): ``(B, T, C)``.
        policy (Tensor, optional): ``(B, T)`` float policy (or bool key mask).
        need_attn (bool): return the attention and context.
        mode (str): ``'logits'`` or ``'policy'``.
        training (bool): apply the attention dropout.
        attn_rows (str): ``'all'`` or ``'cls'`` (:data:`ATTN_ROWS`).
        policy_grad (str): ``'secant'`` or ``'tangent'``
            (:func:`masked_attention`).

    Returns:
        tuple: ``(out (B, T, C), attn (B, h, T, T) or (B, h, 1, T) | None,
        context (B, h, T, d) | None)``.
    """
    check_choice('attn_rows', attn_rows, ATTN_ROWS)
    if policy is None and not need_attn:
        return layer(x), None, None
    mha = layer.attn
    B, T, C = x.shape
    qkv = mha.qkv(layer.ln1(x)).reshape(B, T, 3, mha.num_heads,
                                        mha.head_dims).permute(
                                            2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    fused_row = need_attn and attn_rows == 'cls' and mode == 'logits'
    if mode == 'policy' or (need_attn and not fused_row):
        context, attn = masked_attention(q, k, v, mha.head_dims**-0.5,
                                         policy, mode,
                                         policy_grad=policy_grad)
        if training and mha.attn_drop > 0:  # as upstream's SDPA
            context = F.dropout(attn, mha.attn_drop) @ v
    else:
        # fused kernel: a bool key mask gives pruned keys weight 0
        keys = None if policy is None else (policy > 0)[:, None, None, :]
        context = F.scaled_dot_product_attention(
            q, k, v, attn_mask=sdpa_mask(keys, q.dtype),
            dropout_p=mha.attn_drop if training else 0.)
        attn = masked_softmax(
            attention_logits(q[:, :, :1], k, mha.head_dims**-0.5),
            keys) if fused_row else None
    out = mha.proj(context.transpose(1, 2).reshape(B, T, C))
    x = x + mha.out_drop(mha.gamma1(mha.proj_drop(out)))
    x = layer.ffn(layer.ln2(x), identity=x)
    return x, attn, context


def tokens_and_last_attention(vit, images):
    """A teacher ViT's final (normed) tokens, last attention and grid.

    Args:
        vit (VisionTransformer): the model (one class token required).
        images (Tensor): ``(B, 3, H, W)``.

    Returns:
        tuple: ``(B, T, C)`` tokens, ``(B, h, T, T)`` attention, ``(H, W)``.
    """
    if getattr(vit, 'cls_token', None) is None or \
            vit.num_extra_tokens != 1:
        raise ValueError('the teacher must be a ViT with exactly one class '
                         'token (no distillation token), got '
                         f'{type(vit).__name__} with {vit.num_extra_tokens} '
                         'extra tokens')
    x, hw = embed_tokens(vit, images)
    last = len(vit.layers) - 1
    attn = None

    def step(i, layer, x):
        nonlocal attn
        x, attn_i, _ = layer_forward(layer, x, need_attn=i == last)
        attn = attn_i if i == last else attn
        return x

    _, x = run_layers(vit, x, hw, step=step, outputs=False)
    return x, attn, hw


class PruningState:
    """Token bookkeeping of a pruned forward, and one pruning step.

    Tokens are ``(B, E + K, C)``: ``K = N`` in ``'mask'`` execution, the
    kept (padded) count after a ``'drop'``.

    Args:
        x (Tensor): the embedded tokens ``(B, E + N, C)``.
        num_extra_tokens (int): ``E``.
        keep_pruned (bool): snapshot tokens as pruned (to restore the grid).

    Attributes:
        index (Tensor): ``(B, K)`` patch positions of the current tokens.
        alive (Tensor): ``(B, K)`` bool, False where pruned or padding.
        policy (Tensor | None): ``(B, E + N)`` float policy (``'mask'``).
        key_mask (Tensor | None): ``(B, E + K)`` bool padding mask.
        full (Tensor | None): ``(B, N, C)`` snapshot of pruned tokens.
        count (Tensor): ``(B, )`` float, tokens the next layer processes.
    """

    def __init__(self, x, num_extra_tokens, keep_pruned=False):
        B, T = x.shape[:2]
        E = num_extra_tokens
        N = T - E
        self.num_extra_tokens = E
        self.num_patches = N
        self.index = torch.arange(N, device=x.device).expand(B, N)
        self.alive = torch.ones(B, N, dtype=torch.bool, device=x.device)
        self.policy = None
        self.key_mask = None
        self.full = x[:, E:] if keep_pruned else None
        #: ``(B, K, 1)`` patches per token (prune and merge), else None
        self.size = None
        self.count = x.new_full((B, ), float(T))

    def attention_mask(self, mask):
        """The next layer's softmax mask.

        Args:
            mask (bool): ``'mask'`` execution (else ``'drop'``).

        Returns:
            Tensor | None: policy ``(B, E + N)`` or padding ``(B, E + K)``.
        """
        return self.policy if mask else self.key_mask

    def grid_scores(self, scores):
        """Scores of the current tokens placed on the patch grid.

        Args:
            scores (Tensor): ``(B, K)``.

        Returns:
            Tensor: ``(B, N)``, zero at pruned positions.
        """
        B = scores.shape[0]
        return scores.new_zeros(B, self.num_patches).scatter(
            1, self.index, scores.masked_fill(~self.alive, 0.))

    def keep_mask(self):
        """``(B, N)`` bool: the patch positions alive now."""
        return self.alive.new_zeros(self.alive.shape[0],
                                    self.num_patches).scatter(
                                        1, self.index, self.alive)

    def mask(self, x, keep):
        """``'mask'`` execution: multiply the policy by ``keep``.

        Args:
            x (Tensor): the current tokens ``(B, E + N, C)``.
            keep (Tensor): ``(B, N)`` bool, or float (straight-through).

        Returns:
            Tensor: ``x``, unchanged.
        """
        E = self.num_extra_tokens
        if keep.dtype == torch.bool:
            keep = keep.to(x.dtype)
        patch_policy = keep if self.policy is None else \
            self.policy[:, E:] * keep
        self.policy = torch.cat((x.new_ones(x.shape[0], E), patch_policy),
                                dim=1)
        new_alive = patch_policy > 0.5
        if self.full is not None:  # snapshot of the tokens pruned here
            dropped = (self.alive & ~new_alive)[..., None]
            self.full = torch.where(dropped, x[:, E:], self.full)
        self.alive = new_alive
        self.count = E + patch_policy.sum(dim=-1)
        return x

    def drop(self, x, keep, scores=None):
        """``'drop'`` execution: gather the kept tokens, padding masked.

        Args:
            x (Tensor): the current tokens ``(B, E + K, C)``.
            keep (Tensor): ``(B, K)`` bool or float keep mask.
            scores (Tensor, optional): ``(B, K)``; given, each image keeps
                the batch-mean count (``batch_mode='mean'``).

        Returns:
            Tensor: the kept tokens ``(B, E + K', C)``.
        """
        E = self.num_extra_tokens
        keep = keep > 0.5 if keep.dtype != torch.bool else keep
        if scores is not None and self.key_mask is None:
            return self._drop_to_mean(x, keep, scores)
        if scores is not None:  # rows already padded: cut, then pad
            keep = batch_mean_keep_mask(
                scores.masked_fill(~self.alive, float('-inf')),
                keep & self.alive)
        keep = keep & self.alive
        if self.full is not None:
            self.full = restore_tokens(self.full, x[:, E:], self.index,
                                       self.alive)
        x, sub, self.key_mask = pad_kept_tokens(x, keep, E)
        if self.size is not None:
            self.size = self.size.gather(1, sub[..., None])
        self.index = self.index.gather(1, sub)
        self.alive = keep.gather(1, sub)
        self.count = (E + self.alive.sum(dim=-1)).to(x.dtype)
        return x

    def _drop_to_mean(self, x, keep, scores):
        """:meth:`drop`, ``batch_mode='mean'``, no row padded: top-k."""
        E = self.num_extra_tokens
        sub = batch_mean_kept_index(scores, keep)
        if sub.shape[1] == scores.shape[1]:  # every token kept: no copy
            return x
        if self.full is not None:
            self.full = restore_tokens(self.full, x[:, E:], self.index)
        x = torch.cat((x[:, :E], gather_tokens(x[:, E:], sub)), dim=1)
        self.index = self.index.gather(1, sub)
        self.alive = self.alive.gather(1, sub)
        self.count = x.new_full((x.shape[0], ), float(x.shape[1]))
        return x
