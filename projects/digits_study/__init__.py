"""The small-scale study on real digits (``docs/study.md``): our research
harness, beside the package and not shipped with it.

Its configs (``configs/study/``) name it in ``custom_imports``
(``'projects.digits_study'``), which registers the digits datasets and the
convolutional stem of one host under the type names they always had
(``mmvitaccel.DigitsCanvas``, ``mmvitaccel.ConvStem`` ...). The repository's
root must be on ``sys.path``: the tools put it there; elsewhere, run from the
root with ``PYTHONPATH=.``.
"""
from projects.digits_study import conv_stem, datasets  # noqa: F401
