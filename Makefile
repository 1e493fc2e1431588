# mmvitaccel quick start:  make demo  |  make test
# STACK=oldest (or `make test-oldest`): the oldest supported stack, in
# .venv-oldest (tools/setup_env.sh)
STACK ?= pinned
ifeq ($(STACK),oldest)
VENV ?= .venv-oldest
else
VENV ?= .venv
endif
export VENV STACK
PY := $(VENV)/bin/python
# The config `make demo` trains on generated COCO data.
DEMO_CONFIG ?= configs/stvit_r_swin_s_coco.py
DEMO_EPOCHS ?= 5
# keep a barely trained detector's low-scoring boxes for the COCO table;
# clear it (DEMO_OPTIONS=) for configs that are not two-stage detectors
DEMO_OPTIONS ?= model.test_cfg.rcnn.score_thr=0.001
DEMO_WORK_DIR ?= work_dirs/demo
PYTEST_ARGS ?=
# pytest-xdist workers of `make test`, one per core; whole files go to one
# worker (--dist loadfile), so module fixtures are made once
TEST_WORKERS ?= $(shell nproc)

.PHONY: setup demo test test-fast test-oldest

setup:
	tools/setup_env.sh

demo: setup
	$(PY) tools/train.py $(DEMO_CONFIG) --tiny --work-dir $(DEMO_WORK_DIR) \
		--cfg-options tiny.max_epochs=$(DEMO_EPOCHS) $(DEMO_OPTIONS)
	$(PY) tools/analysis/get_flops.py $(DEMO_CONFIG) --tiny --num-images 2

# pytest exits with 5 when it collects no tests; that is not a failure here.
# --durations: the slowest tests are printed at the end of every run.
test: setup
	$(PY) -m pytest tests -n $(TEST_WORKERS) --dist loadfile --durations=20 \
		$(PYTEST_ARGS); rc=$$?; \
		if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; rc=0; fi; \
		exit $$rc

# the quick subset: tests marked slow (pytest.ini) are left out
test-fast: setup
	$(PY) -m pytest tests -m "not slow" $(PYTEST_ARGS); rc=$$?; \
		if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; rc=0; fi; \
		exit $$rc

# the suite on the oldest supported stack (Python 3.10, torch 2.1.2, numpy < 2)
test-oldest:
	$(MAKE) test STACK=oldest VENV=.venv-oldest
