"""cFFN: the FFN's output matrix factorised and re-parameterised.

Paper: *Vision Transformer with Attention Map Hallucination and FFN
Compaction*. A vanilla FFN is ``FFN(X) = Act(X M1) M2`` with
``M1: C x mC`` and ``M2: mC x C``. cFFN keeps ``M1`` and the activation
and factors ``M2 = U V`` with ``U: mC x k``, ``V: k x C`` and
``k = t m C / (m + 1)`` (``t`` the compact ratio, default 0.5,
``docs/hmhsa_cffn_design.md#cffn``):

* training form: each factor is a sum of ``r`` branches of
  (1x1 conv + BatchNorm) (default ``r = 2``, our choice:
  ``docs/hmhsa_cffn_design.md#defaults``);
* deploy form (:meth:`RepLinear.switch_to_deploy`): the branches are folded
  into one linear layer with a bias, the same function in eval mode.

FLOPs: ``FFN = 2 m N C^2``, ``cFFN = m N C^2 + m N C k + N k C =
m N C^2 (1 + t)``, i.e. a ratio ``(1 + t) / 2``.

Plain torch; the OpenMMLab glue is in ``mmvitaccel.models.hvit.cffn``.
"""
import torch
import torch.nn as nn

from mmvitaccel.ops.flops import linear_flops, mlp_flops, mlp_params

__all__ = [
    'compact_dims', 'RepLinear', 'CompactLinear', 'switch_to_deploy',
    'ffn_flops', 'cffn_flops', 'ffn_params', 'cffn_params'
]


def compact_dims(hidden, out, ratio=0.5):
    """Rank ``k`` of the factorised ``M2``: ``k = t m C / (m + 1)``.

    With ``hidden = mC`` and ``out = C``, ``m C / (m + 1) = hidden * out /
    (hidden + out)``, which also covers a non-integer ``m``.

    Args:
        hidden (int): ``mC``, input channels of ``M2``.
        out (int): ``C``, output channels of ``M2``.
        ratio (float): The compact ratio ``t`` in ``(0, 1]``.

    Returns:
        int: ``k``, rounded to the nearest integer, at least 1.
    """
    if not 0 < ratio <= 1:
        raise ValueError(f'the compact ratio t must be in (0, 1], got {ratio}')
    return max(1, int(round(ratio * hidden * out / (hidden + out))))


class RepLinear(nn.Module):
    """``r`` parallel (1x1 conv + BN) branches, foldable into one linear.

    Training form: ``y = sum_i BN_i(x W_i)`` with ``W_i: in x out`` (a 1x1
    convolution on tokens is a linear map) and BN over the channels, its
    statistics taken over all tokens of the batch. Deploy form:
    ``y = x W + b`` with ``W = sum_i W_i * gamma_i / sigma_i`` and
    ``b = sum_i beta_i - mu_i * gamma_i / sigma_i``, ``sigma_i =
    sqrt(var_i + eps)`` (the running statistics).

    Args:
        in_features (int): Input channels.
        out_features (int): Output channels.
        branches (int): ``r``, at least 1.
        deploy (bool): Build the folded form directly (to load a converted
            checkpoint).
        bn_eps (float): BatchNorm epsilon.
    """

    def __init__(self,
                 in_features,
                 out_features,
                 branches=2,
                 deploy=False,
                 bn_eps=1e-5):
        super().__init__()
        if not isinstance(branches, int) or branches < 1:
            raise ValueError(f'branches (r) must be an int >= 1, '
                             f'got {branches!r}')
        self.in_features = in_features
        self.out_features = out_features
        self.num_branches = branches
        self.deploy = deploy
        if deploy:
            self.fused = nn.Linear(in_features, out_features)
        else:
            self.weights = nn.ParameterList([
                nn.Parameter(torch.empty(out_features, in_features))
                for _ in range(branches)
            ])
            self.norms = nn.ModuleList([
                nn.BatchNorm1d(out_features, eps=bn_eps)
                for _ in range(branches)
            ])
            self.reset_parameters()

    def reset_parameters(self):
        """Branch weights as ``nn.Linear`` initialises its weight, BN as
        identity."""
        if self.deploy:
            self.fused.reset_parameters()
            return
        for weight in self.weights:
            nn.init.kaiming_uniform_(weight, a=5**0.5)
        for norm in self.norms:
            norm.reset_parameters()

    def forward(self, x):
        """
        Args:
            x (Tensor): ``(..., in_features)``.

        Returns:
            Tensor: ``(..., out_features)``.
        """
        if self.deploy:
            return self.fused(x)
        shape = x.shape[:-1]
        flat = x.reshape(-1, self.in_features)
        out = 0
        for weight, norm in zip(self.weights, self.norms):
            out = out + norm(flat @ weight.t())  # BN_i(X W_i)
        return out.reshape(*shape, self.out_features)

    def forward_channels_first(self, x):
        """The same map on channels-first input, a 1x1 convolution.

        Used on feature maps (PVTv2's MixFFN): no copy into a token layout.
        BatchNorm1d takes ``(B, C, L)`` as it is, with the statistics over
        ``B`` and ``L``, those of the token form.

        Args:
            x (Tensor): ``(B, in_features, L)``.

        Returns:
            Tensor: ``(B, out_features, L)``, ``W^T x (+ b)`` per position.
        """
        B, _, L = x.shape
        if self.deploy:  # one batched product, the bias added in it
            return torch.baddbmm(
                self.fused.bias[:, None].expand(B, self.out_features, L),
                self.fused.weight.expand(B, *self.fused.weight.shape), x)
        out = 0
        for weight, norm in zip(self.weights, self.norms):
            out = out + norm(torch.bmm(weight.expand(B, *weight.shape), x))
        return out  # sum_i BN_i(W_i^T x)

    @torch.no_grad()
    def fused_weight_bias(self):
        """The folded ``(W, b)``: ``(out, in)`` and ``(out,)``."""
        if self.deploy:
            return self.fused.weight.clone(), self.fused.bias.clone()
        weight = 0
        bias = 0
        for w, norm in zip(self.weights, self.norms):
            std = (norm.running_var + norm.eps).sqrt()
            gamma = norm.weight if norm.affine else torch.ones_like(std)
            beta = norm.bias if norm.affine else torch.zeros_like(std)
            weight = weight + w * (gamma / std)[:, None]
            bias = bias + beta - norm.running_mean * gamma / std
        return weight, bias

    @torch.no_grad()
    def switch_to_deploy(self):
        """Fold the branches into one ``nn.Linear`` named ``fused`` (in
        place); the training-form parameters are removed."""
        if self.deploy:
            return
        weight, bias = self.fused_weight_bias()
        ref = self.weights[0]
        self.fused = nn.Linear(
            self.in_features,
            self.out_features,
            device=ref.device,
            dtype=ref.dtype)
        self.fused.weight.copy_(weight)
        self.fused.bias.copy_(bias)
        del self.weights
        del self.norms
        self.deploy = True

    def extra_repr(self):
        return (f'{self.in_features}, {self.out_features}, '
                f'branches={self.num_branches}, deploy={self.deploy}')


class CompactLinear(nn.Module):
    """``M2 ~ U V``: the factorised hidden-to-output projection of cFFN.

    Args:
        in_features (int): ``mC``.
        out_features (int): ``C``.
        ratio (float): Compact ratio ``t``; ``k = t m C / (m + 1)``.
        branches (int): ``r`` (1x1 conv + BN) branches per factor while
            training.
        deploy (bool): Build the folded form.
        channel_dim (int): Dimension of the channels: ``-1`` for tokens
            ``(..., mC)``, ``1`` for maps ``(B, mC, H, W)`` (a 1x1 conv
            FFN such as PVTv2's MixFFN).
    """

    def __init__(self,
                 in_features,
                 out_features,
                 ratio=0.5,
                 branches=2,
                 deploy=False,
                 channel_dim=-1):
        super().__init__()
        if channel_dim not in (-1, 1):
            raise ValueError(f'channel_dim must be -1 (tokens) or 1 (maps), '
                             f'got {channel_dim}')
        self.rank = compact_dims(in_features, out_features, ratio)
        self.ratio = ratio
        self.channel_dim = channel_dim
        self.u = RepLinear(in_features, self.rank, branches, deploy)
        self.v = RepLinear(self.rank, out_features, branches, deploy)

    def forward(self, x):
        """
        Args:
            x (Tensor): ``(..., mC)`` or ``(B, mC, H, W)`` (``channel_dim``).

        Returns:
            Tensor: ``x U V``, ``(..., C)`` or ``(B, C, H, W)``.
        """
        if self.channel_dim == 1:
            # (B, mC, H, W) as (B, mC, H W): both factors as 1x1 convs
            out = self.v.forward_channels_first(
                self.u.forward_channels_first(x.flatten(2)))
            return out.unflatten(2, x.shape[2:])
        return self.v(self.u(x))

    def switch_to_deploy(self):
        """Fold both factors (see :meth:`RepLinear.switch_to_deploy`)."""
        self.u.switch_to_deploy()
        self.v.switch_to_deploy()


def switch_to_deploy(model):
    """Fold every re-parameterisable module of ``model`` in place.

    Args:
        model (nn.Module): Any model; every :class:`RepLinear` inside it
            is folded.

    Returns:
        nn.Module: ``model``.
    """
    for module in list(model.modules()):
        if isinstance(module, RepLinear):
            module.switch_to_deploy()
    return model


def ffn_flops(n, c, hidden):
    """Closed-form FLOPs of a vanilla FFN: ``2 m N C^2`` (``hidden = mC``),
    :func:`~mmvitaccel.ops.flops.mlp_flops`.

    Args:
        n (int): Tokens ``N``.
        c (int): Channels ``C``.
        hidden (int): ``mC``.

    Returns:
        int: FLOPs of one image (biases and activation free).
    """
    return mlp_flops(n, c, hidden)


def cffn_flops(n, c, hidden, ratio=0.5):
    """Closed-form FLOPs of cFFN (deploy form):
    ``m N C^2 + m N C k + N k C`` with ``k`` from :func:`compact_dims`;
    ``m N C^2 (1 + t)`` when ``k`` is exact.

    Args:
        n (int): Tokens.
        c (int): Channels.
        hidden (int): ``mC``.
        ratio (float): ``t``.

    Returns:
        int: FLOPs of one image.
    """
    k = compact_dims(hidden, c, ratio)
    # M1, then the two factors U, V of M2
    return (linear_flops(n, c, hidden) + linear_flops(n, hidden, k) +
            linear_flops(n, k, c))


def ffn_params(c, hidden):
    """Parameters of a vanilla FFN: ``2 m C^2 + mC + C``
    (:func:`~mmvitaccel.ops.flops.mlp_params`).

    Args:
        c (int): Channels.
        hidden (int): ``mC``.

    Returns:
        int: Parameter count.
    """
    return mlp_params(c, hidden)


def cffn_params(c, hidden, ratio=0.5):
    """Parameters of cFFN in deploy form:
    ``m C^2 + mC + mC k + k + k C + C``.

    Args:
        c (int): Channels.
        hidden (int): ``mC``.
        ratio (float): ``t``.

    Returns:
        int: Parameter count.
    """
    k = compact_dims(hidden, c, ratio)
    return c * hidden + hidden + hidden * k + k + k * c + c
