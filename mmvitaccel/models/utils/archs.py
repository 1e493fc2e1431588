"""The size tables of the hosts, importable without any toolbox."""

__all__ = ['DEIT_ARCHS', 'SWIN_ARCHS']

#: DeiT size names (mmpretrain's own ``'small'`` is ViT-S; ours mean DeiT)
DEIT_ARCHS = {'tiny': 'deit-tiny', 'small': 'deit-small', 'base': 'deit-base'}

#: embed_dims, depths, num_heads of the Swin sizes
SWIN_ARCHS = {
    'tiny': dict(embed_dims=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24)),
    'small': dict(embed_dims=96, depths=(2, 2, 18, 2),
                  num_heads=(3, 6, 12, 24)),
    'base': dict(embed_dims=128, depths=(2, 2, 18, 2),
                 num_heads=(4, 8, 16, 32)),
}
