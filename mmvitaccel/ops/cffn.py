"""cFFN: ``Act(X M1) U V``, ``k = t m C / (m + 1)``, factors of ``r`` (1x1
conv + BN) branches folded for deployment (``docs/hmhsa_cffn_design.md``)."""
import torch
import torch.nn as nn

from mmvitaccel.ops.flops import linear_flops, mlp_flops, mlp_params

__all__ = [
    'compact_dims', 'RepLinear', 'CompactLinear', 'switch_to_deploy',
    'ffn_flops', 'cffn_flops', 'ffn_params', 'cffn_params'
]


def compact_dims(hidden, out, ratio=0.5):
    """Rank ``k = t m C / (m + 1) = t hidden out / (hidden + out)``.

    Args:
        hidden (int): ``mC``, input channels of ``M2``.
        out (int): ``C``, output channels of ``M2``.
        ratio (float): The compact ratio ``t`` in ``(0, 1]``.

    Returns:
        int: ``k``, rounded, at least 1.
    """
    if not 0 < ratio <= 1:
        raise ValueError(f'the compact ratio t must be in (0, 1], got {ratio}')
    return max(1, int(round(ratio * hidden * out / (hidden + out))))


class RepLinear(nn.Module):
    """``y = sum_i BN_i(x W_i)``, foldable into ``y = x W + b`` with ``W =
    sum_i W_i gamma_i / sigma_i``, ``b = sum_i beta_i - mu_i gamma_i /
    sigma_i``, ``sigma_i = sqrt(var_i + eps)``.

    Args:
        in_features (int): Input channels.
        out_features (int): Output channels.
        branches (int): ``r``, at least 1.
        deploy (bool): Build the folded form directly.
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
        """Branch weights as ``nn.Linear``'s, BN as identity."""
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
        """The same map on channels-first input ``(B, in, L)``, no copy.

        Args:
            x (Tensor): ``(B, in_features, L)``.

        Returns:
            Tensor: ``(B, out_features, L)``.
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
        """Fold the branches into one ``nn.Linear`` ``fused``, in place."""
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
        ratio (float): Compact ratio ``t``.
        branches (int): ``r`` branches per factor while training.
        deploy (bool): Build the folded form.
        channel_dim (int): ``-1`` for tokens ``(..., mC)``, ``1`` for maps
            ``(B, mC, H, W)``.
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
        """Fold both factors."""
        self.u.switch_to_deploy()
        self.v.switch_to_deploy()


def switch_to_deploy(model):
    """Fold every :class:`RepLinear` of ``model`` in place.

    Args:
        model (nn.Module): Any model.

    Returns:
        nn.Module: ``model``.
    """
    for module in list(model.modules()):
        if isinstance(module, RepLinear):
            module.switch_to_deploy()
    return model


def ffn_flops(n, c, hidden):
    """FLOPs of a vanilla FFN: ``2 m N C^2``.

    Args:
        n (int): Tokens ``N``.
        c (int): Channels ``C``.
        hidden (int): ``mC``.

    Returns:
        int: FLOPs of one image.
    """
    return mlp_flops(n, c, hidden)


def cffn_flops(n, c, hidden, ratio=0.5):
    """FLOPs of cFFN (deploy form): ``m N C^2 + m N C k + N k C``.

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
    """Parameters of a vanilla FFN: ``2 m C^2 + mC + C``.

    Args:
        c (int): Channels.
        hidden (int): ``mC``.

    Returns:
        int: Parameter count.
    """
    return mlp_params(c, hidden)


def cffn_params(c, hidden, ratio=0.5):
    """Parameters of cFFN (deploy): ``m C^2 + mC + mC k + k + k C + C``.

    Args:
        c (int): Channels.
        hidden (int): ``mC``.
        ratio (float): ``t``.

    Returns:
        int: Parameter count.
    """
    k = compact_dims(hidden, c, ratio)
    return c * hidden + hidden + hidden * k + k + k * c + c
