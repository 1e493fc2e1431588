"""What a token-pruned ViT forward leaves behind, and the FLOPs it implies.

:class:`~mmvitaccel.models.TokenPrunedVisionTransformer` records,
per forward, the keep masks of each pruning location, the scores and the
tokens each layer processes; :class:`PruningRecordsMixin` holds these
records and the queries on them (any layer's keep mask, the kept indices,
the closed-form FLOPs of the counts).
"""
import torch

from mmvitaccel.ops import vit_layer_flops

__all__ = ['PruningRecordsMixin']


class PruningRecordsMixin:
    """Records of the last forward of a token-pruned ViT, and their FLOPs.

    The host (a ``VisionTransformer``) fills ``keep_masks`` (per pruning
    location, ``(B, N)`` bool), ``scores``, ``token_counts``
    ``(B, num_layers)``, ``final_tokens``/``final_alive``/``final_index``
    and ``_num_patches`` (``N``) in its forward, after
    :meth:`_clear_records`. It comes after ``VisionTransformer`` in the
    host's bases (it only adds methods the host does not have).
    """

    def _clear_records(self):
        """Forget the last forward's records (a new forward starts)."""
        self.keep_masks = []
        self.scores = []
        self.token_counts = None
        self.final_tokens = None
        self.final_alive = None
        self.final_index = None

    def layer_keep_mask(self, layer):
        """The patch positions layer ``layer`` processes in the last
        forward: ``(B, N)`` bool (all True before the first pruning, and
        when nothing was pruned).

        Args:
            layer (int): a layer index, ``0 .. num_layers - 1``.

        Returns:
            Tensor: ``(B, N)`` bool over the patch grid.
        """
        if not 0 <= layer < self.num_layers:
            raise ValueError(f'layer must be in 0..{self.num_layers - 1}, '
                             f'got {layer}')
        if self.token_counts is None:
            raise ValueError('no forward has run yet')
        stages = [s for s, p in enumerate(self.prune_before) if p <= layer]
        if not stages or not self.keep_masks:
            return torch.ones(self.token_counts.shape[0], self._num_patches,
                              dtype=torch.bool,
                              device=self.token_counts.device)
        return self.keep_masks[stages[-1]]

    @property
    def kept_indices(self):
        """Per pruning location, a list over the batch of the ``(K_b,)``
        kept patch positions (ascending) after it."""
        return [[m.nonzero().flatten() for m in keep]
                for keep in self.keep_masks]

    # --- FLOPs ------------------------------------------------------------

    def analytic_flops(self, token_counts=None):
        """Per-image FLOPs of the transformer layers, from token counts.

        ``sum_l FLOPs_layer(n_l)`` (:func:`vit_layer_flops`, the
        :func:`count_flops` convention) plus the final norm ``5 n_L C``; the
        patch embedding and the head are the same for every density and
        left out.

        Args:
            token_counts (Tensor, optional): ``(B, num_layers)``; default the
                last forward's :attr:`token_counts`.

        Returns:
            Tensor: ``(B,)``.
        """
        counts = self.token_counts if token_counts is None else token_counts
        flops = vit_layer_flops(counts, self.embed_dims,
                                self.arch_settings['feedforward_channels'])
        norm = 5 * self.embed_dims * counts[:, -1] if self.final_norm else 0.
        return flops.sum(dim=-1) + norm

    def dense_flops(self, num_tokens):
        """:meth:`analytic_flops` of the unpruned model.

        Args:
            num_tokens (int): tokens per layer, class token included.

        Returns:
            float: per-image FLOPs.
        """
        norm = 5 * self.embed_dims * num_tokens if self.final_norm else 0
        return self.num_layers * vit_layer_flops(
            float(num_tokens), self.embed_dims,
            self.arch_settings['feedforward_channels']) + norm
