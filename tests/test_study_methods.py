"""The study's trained methods (configs/study/methods.py): each config starts
from a host checkpoint as its entry says, trains one step on a few digit
canvases with gradients reaching what the method adds, and predicts; all
share the host's data and one fine-tuning budget."""
import copy
import os.path as osp
import runpy

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope, init_default_scope
from mmengine.runner import Runner

from mmvitaccel.apis import add_checkpoint_check
from mmvitaccel.models.distill.teacher import TeacherMixin

from .tolerance import assert_equal, rounding_tol
from .utils import (REPO, parameter_updates, small_digits_run,
                    trainable_state)

HOST = 'configs/study/digits_deit_host.py'
METHODS = runpy.run_path(osp.join(REPO, 'configs/study/methods.py'))['METHODS']
NAMES = [m['name'] for m in METHODS]

#: what each method adds to the host (name fragments of its state dict
#: entries that the host checkpoint cannot give under the same name/shape)
NEW = {
    'STViT-DeiT': ('global_centres', 'backbone.ln2.', 'backbone.pooler.'),
    'SaiT': (),
    'AS-ViT': ('backbone.thresholds', ),
    # V is converted from the host's qkv rows by the DGSSA loader
    'Integrated-DeiT': ('.static_logits', '.attn.v.', 'glads.'),
    'Integrated-DeiT, paper layout': ('.static_logits', '.attn.v.',
                                      'glads.'),
    'ToMe': (),
    'cls pruning, fine-tuned': (),
    'cls prune and merge, fine-tuned': (),
    # Q^/K^/V are converted from the host's qkv by the hMHSA loader
    'hMHSA + cFFN': ('.attn.q.', '.attn.k.', '.attn.v.', '.hallucination.',
                     '.ffn.layers.1.'),
}


def _entry(name):
    return METHODS[NAMES.index(name)]


def _cfg(entry):
    cfg = Config.fromfile(osp.join(REPO, entry['config']))
    cfg.merge_from_dict(copy.deepcopy(entry['cfg_options']))
    return cfg


def _get(cfg, key):
    node = cfg
    for part in key.split('.'):
        node = node[part]
    return node


@pytest.fixture(scope='module')
def host(tmp_path_factory):
    """A host checkpoint as the runner writes it (random weights, moved off
    their initial values so that loading them is visible)."""
    init_default_scope('mmpretrain')
    from mmpretrain.registry import MODELS
    torch.manual_seed(0)
    model = MODELS.build(Config.fromfile(osp.join(REPO, HOST)).model)
    model.init_weights()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    path = str(tmp_path_factory.mktemp('host') / 'host.pth')
    torch.save(dict(state_dict=model.state_dict(), meta=dict()), path)
    return path, model.state_dict()


@pytest.fixture(scope='module')
def dgssa(host, tmp_path_factory):
    """tools/dgssa_init.py's output on the host, over 8 training canvases."""
    from mmvitaccel.analysis.attention_stats import (build_host_backbone,
                                                     collect_attention,
                                                     dgssa_checkpoint)
    cfg = _cfg(_entry('Integrated-DeiT'))
    cfg.train_dataloader.dataset.max_samples = 8
    # the backbone's type is mmvitaccel's without its scope prefix
    with DefaultScope.overwrite_default_scope('mmvitaccel'):
        backbone = build_host_backbone(cfg, host[0])
    stats, seen = collect_attention(cfg, backbone, 8, 'train', 8)
    assert seen == 8
    path = str(tmp_path_factory.mktemp('dgssa') / 'dgssa.pth')
    torch.save(dgssa_checkpoint(backbone, stats, {}), path)
    return path


def _run_cfg(entry, host_path, dgssa_path, work_dir):
    """The entry's config with its host (and DGSSA) inputs, on 16 train and
    8 test canvases."""
    cfg = _cfg(entry)
    options = {k: host_path for k in entry['host_options']}
    options.update({k: dgssa_path for k in entry['dgssa_options']})
    cfg.merge_from_dict(options)
    add_checkpoint_check(cfg)  # as tools/train.py does
    return small_digits_run(cfg, work_dir)


def test_entries_share_the_host_data_and_one_budget():
    host = Config.fromfile(osp.join(REPO, HOST))
    budget = None
    assert sorted(NAMES) == sorted(NEW)
    for entry in METHODS:
        cfg = _cfg(entry)
        assert entry['init'] in ('host', 'dgssa_init')
        # the student starts from the host: all of it (load_from) or
        # through its backbone's converting loader
        assert 'load_from' in entry['host_options'] or \
            'model.backbone.init_cfg.checkpoint' in entry['host_options']
        assert bool(entry['dgssa_options']) == (entry['init'] == 'dgssa_init')
        for key in entry['host_options'] + tuple(entry['dgssa_options']):
            if key == 'load_from':
                continue
            _get(cfg, key)  # the key exists: the study tool can set it
        # the host's data, canvas and network size: the papers' placements
        # carry over to the same 12 layers
        for split in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
            assert cfg[split].dataset == host[split].dataset
        assert cfg.model.backbone.arch == host.model.backbone.arch
        assert cfg.model.backbone.img_size == 32
        # one budget for all methods, shorter than the host's
        mine = (cfg.train_cfg.max_epochs, cfg.optim_wrapper.optimizer,
                cfg.param_scheduler, cfg.randomness)
        assert budget in (None, mine), entry['name']
        budget = mine
        assert cfg.train_cfg.max_epochs < host.train_cfg.max_epochs


@pytest.mark.slow
@pytest.mark.parametrize('name', NAMES)
def test_method_starts_from_the_host_trains_and_predicts(name, host, dgssa,
                                                         tmp_path):
    entry = _entry(name)
    host_path, host_state = host
    cfg = _run_cfg(entry, host_path, dgssa, tmp_path)
    runner = Runner.from_cfg(cfg)
    runner._init_model_weights()  # what runner.train() does first
    runner.load_or_resume()
    model = runner.model

    # everything of the host that the method keeps under its name loads;
    # the rest is what the method adds
    state = model.state_dict()
    same = [k for k in state
            if k in host_state and state[k].shape == host_state[k].shape]
    assert len(same) >= 0.6 * len(host_state)
    for k in same:  # loaded copies
        assert_equal(state[k], host_state[k], msg=k)
    new = [k for k in state if k not in same and 'teacher_glads' not in k]
    stray = [k for k in new if not any(f in k for f in NEW[name])]
    assert not stray, f'{name}: not from the host and not its own: {stray}'
    if NEW[name]:
        assert new, f'{name} adds nothing'
    # a teacher is the host
    if isinstance(model, TeacherMixin) and model.teacher is not None:
        teacher = model.teacher.state_dict()
        prefix = '' if 'backbone.cls_token' in teacher else 'backbone.'
        for k, v in teacher.items():
            assert_equal(v, host_state[prefix + k], msg=k)

    # two steps: every trainable parameter gets a gradient, the new ones
    # included (STViT's inter-window mixing starts to from the second step:
    # its projection starts at zero), and changes
    optim_wrapper = runner.build_optim_wrapper(cfg.optim_wrapper)
    loader = iter(runner.build_dataloader(cfg.train_dataloader))
    model.train()
    before = trainable_state(model)
    got_grad = {}
    handles = [
        p.register_post_accumulate_grad_hook(
            lambda p, n=n: got_grad.__setitem__(
                n, got_grad.get(n, 0.) + float(p.grad.abs().sum())))
        for n, p in model.named_parameters() if p.requires_grad
    ]
    for _ in range(2):
        losses = model.train_step(next(loader), optim_wrapper)
    for h in handles:
        h.remove()
    assert torch.isfinite(losses['loss'])
    missing = [n for n in before if n not in got_grad]
    assert not missing, f'no gradient: {missing}'
    new_params = [n for n in before
                  if any(f in n for f in NEW[name]) and n in new]
    assert all(got_grad[n] > 0 for n in new_params), \
        [n for n in new_params if got_grad[n] == 0]
    updates = parameter_updates(model, before)
    assert sum(updates.values()) >= 0.75 * len(updates)

    # prediction, through the method's test-time settings
    model.eval()
    test_batch = next(iter(runner.build_dataloader(cfg.test_dataloader)))
    with torch.no_grad():
        preds = model.test_step(test_batch)
    assert len(preds) == 8
    assert all(p.pred_score.shape == (10, ) for p in preds)


@pytest.mark.slow
def test_hvit_folds_to_the_same_predictions(host, tmp_path):
    """The fold step of the hMHSA + cFFN entry: tools/reparameterize.py's
    fold of a host-initialised model, loaded into the deploy config that
    the entry tests with, predicts as the training form does."""
    import importlib.util
    entry = _entry('hMHSA + cFFN')
    spec = importlib.util.spec_from_file_location(
        'reparameterize', osp.join(REPO, entry['fold']['tool']))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    cfg = _run_cfg(entry, host[0], None, tmp_path)
    init_default_scope('mmpretrain')
    trained = tool.build(cfg)
    trained.init_weights()
    # move the BN statistics of the cFFN branches off their initial values
    trained.train()
    with torch.no_grad():
        trained(torch.randn(8, 3, 32, 32), mode='tensor')
    ckpt = str(tmp_path / 'trained.pth')
    torch.save(dict(state_dict=trained.state_dict(), meta={}), ckpt)
    out = str(tmp_path / 'deploy.pth')
    argv = [osp.join(REPO, entry['config']), ckpt, out, *entry['fold']['args']]
    diff = tool.main(argv)
    # the tool's float32 check: rounding through the study's host (12
    # layers of C = 64 at 65 tokens: ~800 terms each, n < 1e4) of the class
    # token after a LayerNorm (|y| < 8 = sqrt(C) for unit weights); the
    # float64 check below is the tight one
    assert diff < rounding_tol(torch.float32, 10_000, 8.)
    deploy_cfg = _cfg(entry)
    deploy_cfg.merge_from_dict(entry['fold']['test_options'])
    deploy = tool.build(deploy_cfg)
    deploy.load_state_dict(torch.load(out)['state_dict'])
    x = torch.randn(4, 3, 32, 32, dtype=torch.double)
    trained.eval()
    deploy.eval()
    with torch.no_grad():
        # float64: only the tool's float32 folding differs, <= 4 roundings
        # of each folded weight in U and V of 12 cFFN layers (n = 96,
        # relative to the logits), beside float64 rounding (n < 1e4)
        ref = trained.double()(x, mode='tensor')
        out = deploy.double()(x, mode='tensor')
    scale = float(ref.abs().max())
    assert float((out - ref).abs().max()) <= \
        rounding_tol(torch.float32, 96, scale) + \
        rounding_tol(torch.float64, 10_000, scale)
    assert sum(p.numel() for p in deploy.parameters()) < sum(
        p.numel() for p in trained.parameters())
