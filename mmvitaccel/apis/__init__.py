"""What the tools share: config loading and runner launch (:mod:`.launch`),
the analysis tools' model/data harness (:mod:`.harness`), deployment
(:mod:`.deploy`). Both :mod:`.launch` and :mod:`.harness` have a
``load_config``: import it from its module."""
from mmvitaccel.apis.harness import (DEFAULT_SHAPES, TOOLBOXES, backbone_input,
                                     build_model, dummy_data_batch,
                                     parse_shape, real_data_batches,
                                     tensor_mode_kwargs, toolbox_of)
from mmvitaccel.apis.launch import (add_checkpoint_check, add_common_args,
                                    build_runner, enable_amp,
                                    finish_distributed, load_config_file,
                                    refuse, set_local_rank)

__all__ = [
    'DEFAULT_SHAPES', 'TOOLBOXES', 'add_checkpoint_check', 'add_common_args',
    'backbone_input', 'build_model', 'build_runner', 'dummy_data_batch',
    'enable_amp', 'finish_distributed', 'load_config_file', 'parse_shape',
    'real_data_batches', 'refuse', 'set_local_rank', 'tensor_mode_kwargs',
    'toolbox_of'
]
