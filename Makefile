# Two commands do everything on a fresh machine:
#   make run    create .venv, install, train GRPO on the shipped BIRD sample (CPU is fine)
#   make test   create .venv, install, run the test suite
# Benchmarks (on a committed tree; each says first how long it will take):
#   make bench            every benchmark but the learning runs, then the README's table (under an hour on 2 cores)
#   make bench-learning   the learning runs (several seeds each: hours), then the same table
# By hand, the same install is (upgrade pip first: pip 23 spends over 20 minutes resolving the
# training extra, a current pip seconds):
#   python3 -m venv .venv && .venv/bin/pip install -U pip wheel
#   .venv/bin/pip install -c constraints.txt torch==2.13.0
#   .venv/bin/pip install -c constraints.txt -e '.[train,test,deepspeed]'
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
PIPELINE ?= pipelines/bird_grpo.yaml

.PHONY: install run test lint validate graph bench bench-learning clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip wheel  # first: an old pip (23) resolves the training extra for over 20 minutes

# torch first, pinned through constraints.txt: plain `torch` would pull a multi-GB CUDA build.
$(VENV)/.installed: $(BIN)/activate pyproject.toml constraints.txt
	$(BIN)/pip install -q -c constraints.txt torch==2.13.0
	$(BIN)/pip install -q -c constraints.txt -e '.[train,test,deepspeed]'
	touch $@

install: $(VENV)/.installed

run: install
	$(BIN)/rlflow run $(PIPELINE)

validate: install
	$(BIN)/rlflow validate pipelines/*.yaml

graph: install
	$(BIN)/rlflow graph $(PIPELINE) --render -o step.svg

test: install
	RAY_USAGE_STATS_ENABLED=0 $(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

bench: install
	$(BIN)/python -m benchmarks.run_all

bench-learning: install
	$(BIN)/python -m benchmarks.run_all --learning

clean:
	rm -rf $(VENV) .pytest_cache runs
