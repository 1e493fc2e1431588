"""What the tools share: config loading and runner launch (:mod:`.launch`),
the model/data harness of the analysis tools (:mod:`.harness`), export
and compilation (:mod:`.deploy`). The switch is :mod:`mmvitaccel.switch`.

:mod:`mmvitaccel.apis.launch` is what ``tools/train.py`` and
``tools/test.py`` do with their command line; :mod:`mmvitaccel.apis.harness`
builds a config's model and its inputs for the analysis tools. Both modules
have a ``load_config`` (the first takes parsed arguments, the second a path
and ``tiny``), so neither is exported here: import it from its module.
"""
from mmvitaccel.apis.harness import (DEFAULT_SHAPES, TOOLBOXES, backbone_input,
                                     build_model, dummy_data_batch,
                                     parse_shape, real_data_batches,
                                     tensor_mode_kwargs, toolbox_of)
from mmvitaccel.apis.launch import (add_checkpoint_check, add_common_args,
                                    build_runner, enable_amp,
                                    finish_distributed, load_config_file,
                                    set_local_rank)

__all__ = [
    'DEFAULT_SHAPES', 'TOOLBOXES', 'add_checkpoint_check', 'add_common_args',
    'backbone_input', 'build_model', 'build_runner', 'dummy_data_batch',
    'enable_amp', 'finish_distributed', 'load_config_file', 'parse_shape',
    'real_data_batches', 'set_local_rank', 'tensor_mode_kwargs', 'toolbox_of'
]
