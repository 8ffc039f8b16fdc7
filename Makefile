# The whole set-up of cast lives here: `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(CURDIR)/$(VENV)/bin
PACKAGES := packages/cast-core packages/cast-rewards packages/cast-backbones \
            packages/cast-windows packages/cast-shapes
EXAMPLES := examples/cast-plugin-example
STAMP  := $(VENV)/.installed
PYTEST := $(BIN)/python -m pytest -q -m "not slow"

.PHONY: install test test-alone test-slow lint format mutate demo bench clean

# Idempotent: re-runs pip only when a pyproject.toml (or this file) changed.
install: $(STAMP)
$(STAMP): $(foreach p,$(PACKAGES) $(EXAMPLES),$(p)/pyproject.toml) Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check \
		$(foreach p,$(PACKAGES) $(EXAMPLES),-e "$(p)[dev]")
	touch $(STAMP)

# Each package's tests run alone in its own directory, then the cross-package tests.
# Any non-zero pytest exit fails the target, including 5 ("no tests collected").
test: install
	@set -e; for p in $(PACKAGES) $(EXAMPLES); do \
		echo "== $$p"; (cd $$p && $(PYTEST)); \
	done; echo "== tests/ (cross-package)"; $(PYTEST) tests

# Each package's tests in its own fresh venv (.venv-alone/<name>) holding only the package, its [dev]
# extra and the cast packages it declares, so a dependency that only another package declares fails
# here (in `make test` the one .venv holds everything). Torch is installed once and shared; the
# script's docstring says exactly what the shared directory exposes. Re-runnable: a venv is rebuilt
# only when a pyproject.toml it depends on changed. Needs no `make install`.
test-alone:
	$(PYTHON) scripts/test_alone.py $(PACKAGES) $(EXAMPLES)

# ruff check + ruff format --check (ruff.toml: 120 columns). `make format` rewrites in place.
RUFF_STAMP := $(VENV)/.ruff
$(RUFF_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check "ruff>=0.6"
	touch $(RUFF_STAMP)

lint: $(RUFF_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(RUFF_STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# A package without slow tests may collect none (pytest's exit 5); the target fails when no
# package ran any, so it can never pass on nothing.
test-slow: install
	@set -e; ran=0; for p in $(PACKAGES) $(EXAMPLES) tests; do \
		echo "== $$p (slow)"; code=0; (cd $$p && $(BIN)/python -m pytest -q -m slow) || code=$$?; \
		if [ $$code -eq 0 ]; then ran=1; elif [ $$code -ne 5 ]; then exit $$code; fi; \
	done; \
	if [ $$ran -eq 0 ]; then echo "make test-slow: no slow test was collected in any package" >&2; exit 1; fi

# Mutation testing of cast-core's maths, update and checkpoint paths (docs/testing.md): slow,
# not part of CI. Results stay in packages/cast-core/mutants/ (`mutmut results`, `mutmut show NAME`).
MUTMUT_CHILDREN ?= 2
mutate: install
	$(BIN)/python -m pip install --quiet --disable-pip-version-check "mutmut>=3.3"
	cd packages/cast-core && $(BIN)/mutmut run --max-children $(MUTMUT_CHILDREN)
	cd packages/cast-core && $(BIN)/mutmut results

# The main job: CAST on the built-in shapes world for a fixed 117 steps (about 12 min on 2 cores),
# base vs trained on the held-out test prompts, and runs/demo-*/report.html. DEMO_ARGS passes
# options on, e.g. make demo DEMO_ARGS="--steps 20 --eval-seeds 0,1" for a quick look.
DEMO_ARGS ?=
demo: install
	$(BIN)/cast plugins
	$(BIN)/cast shapes demo $(DEMO_ARGS)

bench: install
	$(BIN)/python benchmarks/cli_startup.py
	$(BIN)/python benchmarks/overhead.py
	$(BIN)/cast bench --quick

clean:
	rm -rf $(VENV) .venv-alone .pytest_cache
