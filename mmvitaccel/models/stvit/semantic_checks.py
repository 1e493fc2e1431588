"""Build-time checks of STViT's semantic stages: STGM sizes and keys."""
from mmvitaccel.ops import check_choice, check_placement
from mmvitaccel.models.utils import check_int, check_int_pair

#: STGM-2 keys: ``Concat(S1, X)`` (Eq. 3) or ``X`` only (authors' DET code)
STGM2_KEYS = ('semantic_and_image', 'image')

def stgm_index_for(depth, move_stgm=False):
    """STGM-1's 0-based block in a stage of ``depth`` blocks.

    ``i = round((2 d - 6) / 3)`` (Swin-T 2, Swin-S/B 10); "move STGM" subtracts
    ``round(1 + (d - 6) / 12)`` (``docs/accelerate.md``).

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
    """``stgm_index`` if given, else :func:`stgm_index_for` ``depth``.

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
        semantic_window (int): ``w_s``, in ``1 .. window``.
        key_windows (tuple[int, int]): ``(k1, k2)``, ``window <= k1 <= k2``.
        window (int): the Swin window side ``w``.

    Returns:
        tuple[int, tuple[int, int]]: ``semantic_window`` and ``key_windows``.

    Raises:
        TypeError: a float ``semantic_window``, or ``key_windows`` not
            a pair of ints.
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
    """Check the STGM key options.

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
