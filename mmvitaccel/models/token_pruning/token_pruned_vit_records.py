"""The records of a token-pruned ViT forward and their analytic FLOPs."""
import torch

from mmvitaccel.ops import vit_layer_flops

__all__ = ['PruningRecordsMixin']


class PruningRecordsMixin:
    """Records of the last forward of a token-pruned ViT, and their FLOPs.

    The host fills ``keep_masks``, ``scores``, ``token_counts``
    ``(B, num_layers)``, ``final_*`` and ``_num_patches`` in its forward.
    """

    def _clear_records(self):
        """Forget the last forward's records."""
        self.keep_masks = []
        self.scores = []
        self.token_counts = None
        self.final_tokens = None
        self.final_alive = None
        self.final_index = None

    def layer_keep_mask(self, layer):
        """The patch positions ``layer`` processed in the last forward.

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
        """Per location, per image, the ``(K_b,)`` kept positions."""
        return [[m.nonzero().flatten() for m in keep]
                for keep in self.keep_masks]

    # --- FLOPs ------------------------------------------------------------

    def analytic_flops(self, token_counts=None):
        """Per-image FLOPs of the transformer layers, from token counts.

        ``sum_l FLOPs_layer(n_l) + 5 n_L C`` (:func:`vit_layer_flops`; the
        final norm; no patch embedding or head).

        Args:
            token_counts (Tensor, optional): ``(B, num_layers)``; default
                :attr:`token_counts`.

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
