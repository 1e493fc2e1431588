"""Child registries of mmengine's root registries, scope ``mmvitaccel``:
``type='mmvitaccel.X'`` resolves from any toolbox's ``default_scope``, and in
our scope names that are not ours fall back to mmengine's."""
from mmengine.registry import DATA_SAMPLERS as MMENGINE_DATA_SAMPLERS
from mmengine.registry import DATASETS as MMENGINE_DATASETS
from mmengine.registry import EVALUATOR as MMENGINE_EVALUATOR
from mmengine.registry import FUNCTIONS as MMENGINE_FUNCTIONS
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.registry import LOOPS as MMENGINE_LOOPS
from mmengine.registry import METRICS as MMENGINE_METRICS
from mmengine.registry import MODEL_WRAPPERS as MMENGINE_MODEL_WRAPPERS
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import \
    OPTIM_WRAPPER_CONSTRUCTORS as MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS
from mmengine.registry import OPTIM_WRAPPERS as MMENGINE_OPTIM_WRAPPERS
from mmengine.registry import OPTIMIZERS as MMENGINE_OPTIMIZERS
from mmengine.registry import PARAM_SCHEDULERS as MMENGINE_PARAM_SCHEDULERS
from mmengine.registry import RUNNERS as MMENGINE_RUNNERS
from mmengine.registry import TASK_UTILS as MMENGINE_TASK_UTILS
from mmengine.registry import TRANSFORMS as MMENGINE_TRANSFORMS
from mmengine.registry import VISUALIZERS as MMENGINE_VISUALIZERS
from mmengine.registry import \
    WEIGHT_INITIALIZERS as MMENGINE_WEIGHT_INITIALIZERS
from mmengine.registry import Registry

_SCOPE = 'mmvitaccel'


def _child(name, parent, locations=()):
    return Registry(
        name, parent=parent, scope=_SCOPE, locations=list(locations))


RUNNERS = _child('runner', MMENGINE_RUNNERS,
                 ['mmvitaccel.engine', 'mmvitaccel.tiny'])
LOOPS = _child('loop', MMENGINE_LOOPS, ['mmvitaccel.engine'])
HOOKS = _child('hook', MMENGINE_HOOKS, ['mmvitaccel.engine'])
DATASETS = _child('dataset', MMENGINE_DATASETS)
DATA_SAMPLERS = _child('data sampler', MMENGINE_DATA_SAMPLERS)
TRANSFORMS = _child('transform', MMENGINE_TRANSFORMS)
MODELS = _child('model', MMENGINE_MODELS, ['mmvitaccel.models'])
MODEL_WRAPPERS = _child('model_wrapper', MMENGINE_MODEL_WRAPPERS,
                        ['mmvitaccel.models'])
WEIGHT_INITIALIZERS = _child('weight initializer',
                             MMENGINE_WEIGHT_INITIALIZERS,
                             ['mmvitaccel.models'])
TASK_UTILS = _child('task util', MMENGINE_TASK_UTILS, ['mmvitaccel.models'])
OPTIMIZERS = _child('optimizer', MMENGINE_OPTIMIZERS, ['mmvitaccel.engine'])
OPTIM_WRAPPERS = _child('optim_wrapper', MMENGINE_OPTIM_WRAPPERS,
                        ['mmvitaccel.engine'])
OPTIM_WRAPPER_CONSTRUCTORS = _child('optimizer wrapper constructor',
                                    MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS,
                                    ['mmvitaccel.engine'])
PARAM_SCHEDULERS = _child('parameter scheduler', MMENGINE_PARAM_SCHEDULERS,
                          ['mmvitaccel.engine'])
METRICS = _child('metric', MMENGINE_METRICS)
EVALUATOR = _child('evaluator', MMENGINE_EVALUATOR)
VISUALIZERS = _child('visualizer', MMENGINE_VISUALIZERS)
FUNCTIONS = _child('function', MMENGINE_FUNCTIONS, ['mmvitaccel.engine'])
