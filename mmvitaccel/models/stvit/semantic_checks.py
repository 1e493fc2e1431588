"""The checks of STViT's semantic stages: STGM sizes, keys and positions.

Paper: Chang et al., *Making Vision Transformers Efficient from A Token
Sparsification View* (CVPR 2023); ``docs/stvit_design.md``. Used at build
time by the Swin backbones of STViT (2-D and video) and STViT-R
(:mod:`~mmvitaccel.models.stvit.semantic_swin_stage`, which also exports
these names).
"""
from mmvitaccel.ops import check_choice, check_placement
from mmvitaccel.models.utils import check_int, check_int_pair

#: keys and values of STGM-2: ``'semantic_and_image'``, the paper's
#: ``Concat(S1, X)`` (Eq. 3), or ``'image'``, ``X`` only (the authors'
#: detection code)
STGM2_KEYS = ('semantic_and_image', 'image')

def stgm_index_for(depth, move_stgm=False):
    """STGM-1's 0-based block in a semantic stage of ``depth`` blocks: the
    paper's rule, ``round((2 d - 6) / 3)`` (blocks 3-4 of Swin-T's 6,
    index 2; 11-12 of Swin-S/B's 18, index 10), or its "move STGM" variant
    ``round(1 + (d - 6) / 12)`` blocks earlier (1 and 2 earlier). The
    switch places STViT by the same rule (``docs/accelerate.md``).

    Args:
        depth (int): the stage's blocks.
        move_stgm (bool): the "move STGM" variant.

    Returns:
        int: the block index.

    Raises:
        ValueError: when no block would follow the STGM (2 blocks).
    """
    index = round((2 * depth - 6) / 3)
    if move_stgm:
        index -= round(1 + (depth - 6) / 12)
    if index < 0 or index + 2 >= depth:
        raise ValueError(
            f'stvit needs stage 3 deep enough for its STGM (2 blocks) and '
            f'a semantic block after it; this host\'s stage 3 has {depth} '
            'blocks (Swin-T has 6)')
    return index


def resolve_stgm_index(stgm_index, move_stgm, depth):
    """The block index of STGM-1: ``stgm_index`` if given, else
    :func:`stgm_index_for` the stage's ``depth``.

    Args:
        stgm_index (int | None): as configured.
        move_stgm (bool): the "move STGM" variant of the default.
        depth (int): the semantic stage's blocks.

    Returns:
        int: the block index.
    """
    if stgm_index is not None:
        return stgm_index
    return stgm_index_for(depth, move_stgm)


def check_semantic_windows(semantic_window, key_windows, window):
    """Check the STGM sizes of a Swin with ``window x window`` windows.

    Args:
        semantic_window (int): ``w_s``, in ``1 .. window`` (adaptive pooling
            bins of the window; it need not divide it).
        key_windows (tuple[int, int]): ``(k1, k2)``, each ``>= window``
            (a region around the window, the window included) and
            ``k1 <= k2``: STGM-2 refines STGM-1's tokens over a context at
            least as wide (the paper's 10 -> 14, the authors' 14 -> 21).
        window (int): the Swin window side ``w``.

    Returns:
        tuple[int, tuple[int, int]]: ``semantic_window`` and ``key_windows``.

    Raises:
        TypeError: a float ``semantic_window``, or ``key_windows`` not a
            list/tuple of ints (e.g. a bare int).
        ValueError: sizes out of range, or ``k1 > k2``.
    """
    semantic_window = check_int(
        'semantic_window', semantic_window, 1, window,
        hint=f'semantic tokens per side of a {window}x{window} window')
    key_windows = check_int_pair(
        'key_windows', key_windows, low=window, example=(10, 14),
        hint='the region sides (k1, k2) of STGM-1 and STGM-2, at least '
        'the window size')
    if key_windows[0] > key_windows[1]:
        raise ValueError(f'key_windows must not decrease: STGM-2 attends to '
                         f'a region at least as large as STGM-1 (k1 <= k2, '
                         f'e.g. (10, 14)), got {key_windows}')
    return semantic_window, key_windows


def check_stgm_keys(stgm2_keys, key_region):
    """Check the STGM key options at build time.

    Args:
        stgm2_keys (str): one of :data:`STGM2_KEYS`.
        key_region (str): one of
            :data:`~mmvitaccel.ops.windows.REGION_PLACEMENTS`.

    Raises:
        ValueError: an unknown value, naming the parameter and the choices.
    """
    check_choice('stgm2_keys', stgm2_keys, STGM2_KEYS)
    check_placement(key_region)


def check_stgm_fits(stgm_index, depth, stage):
    """Raise a clear error unless STGM-1 and STGM-2 fit the stage."""
    if not 0 <= stgm_index <= depth - 2:
        raise ValueError(f'STGM at blocks ({stgm_index}, {stgm_index + 1}) '
                         f'does not fit stage {stage} of {depth} blocks')
