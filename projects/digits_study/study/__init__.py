"""The small-scale accuracy study (``docs/study.md``): a host trained on
real digits, training-free pruning references on it and the trained
methods (the entries of ``configs/study/methods.py``); accuracy,
parameters, FLOPs and measured speed of each, as CSV rows and plots.

``tools/analysis/tradeoff_study.py`` is the command; the logic is in
:mod:`.training` (the host and the methods, trained and cached),
:mod:`.evaluation` (accuracy, FLOPs and speed) and :mod:`.report` (CSV,
tables, plots), all importable from here:

* :func:`host_checkpoint` trains the host with mmengine's runner, or reuses
  the checkpoint cached under ``cache_dir`` by the config's text and seed;
* :func:`pruned_host` is the trained host with token pruning before a layer
  (:class:`~mmvitaccel.models.TokenPrunedVisionTransformer` on the host's
  weights, the value selector at density ``rho``, tokens dropped):
  ``scorer='tis'`` (SaiT's TIS), ``'cls'`` (EViT's class attention),
  ``'random'`` (the floor);
* :func:`top1` evaluates a model on preprocessed test batches;
* :func:`reference_rows` sweeps scorers, densities and seeds;
* :func:`measure` adds parameters, FLOPs (the one counter,
  :func:`~mmvitaccel.analysis.flops.count_flops`) and the speed ratio to
  the host, timed interleaved
  (:func:`~mmvitaccel.analysis.timing.interleaved_benchmark`);
* :func:`write_csv` and :func:`plot_tradeoff` write the results.

A trained method is an entry of :data:`METHODS_FILE`, read by
:func:`load_methods` into a :class:`StudyMethod`: a config, its
cfg-options, how it starts from the host, the test-time settings to
evaluate and an optional fold; :func:`method_checkpoint` trains (or reuses)
it per seed, running ``tools/dgssa_init.py`` and the fold tool where the
entry asks (:func:`run_tool`), and :func:`trained_rows` evaluates it.

The dense evidence (detection and segmentation fine-tuned from a pretrained
Swin classifier, ``tools/analysis/dense_study.py``) is in :mod:`.dense`
(its rows, fine-tuning, training-free conversions, test metrics) and
:mod:`.dense_report` (costs, speed, CSV, plots, the picture of predicted
scenes), imported as submodules; the training-free table of the switch's
methods on both hosts (``tools/analysis/training_free.py``) in
:mod:`.training_free`.
"""
from projects.digits_study.study.evaluation import (HOST_CONFIG,
                                                    REFERENCE_SCORERS,
                                                    build_study_model, measure,
                                                    pruned_host,
                                                    reference_rows, summarise,
                                                    test_inputs,
                                                    test_split_flops, top1,
                                                    trained_rows)
from projects.digits_study.study.report import (FIELDS, choose_summary,
                                                markdown_table, plot_tradeoff,
                                                read_csv, write_csv)
from projects.digits_study.study.training import (INITS, METHODS_FILE,
                                                  TRAIN_RECORD, StudyMethod,
                                                  config_key, host_checkpoint,
                                                  load_methods,
                                                  method_checkpoint,
                                                  read_search, run_tool,
                                                  setting_label, train_record)

__all__ = [
    'FIELDS', 'HOST_CONFIG', 'INITS', 'METHODS_FILE', 'REFERENCE_SCORERS',
    'StudyMethod', 'build_study_model', 'choose_summary', 'config_key',
    'host_checkpoint',
    'load_methods', 'markdown_table', 'measure', 'method_checkpoint',
    'plot_tradeoff', 'pruned_host', 'read_csv', 'read_search',
    'reference_rows', 'run_tool', 'setting_label', 'summarise',
    'test_inputs', 'test_split_flops', 'top1', 'TRAIN_RECORD',
    'train_record', 'trained_rows', 'write_csv'
]
