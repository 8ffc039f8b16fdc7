# The whole set-up of cast lives here: `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(CURDIR)/$(VENV)/bin
PACKAGES := packages/cast-core packages/cast-rewards packages/cast-backbones \
            packages/cast-windows packages/cast-shapes
EXAMPLES := examples/cast-plugin-example
STAMP  := $(VENV)/.installed
PYTEST := $(BIN)/python -m pytest -q -m "not slow"

.PHONY: install test test-slow demo bench clean

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

test-slow: install
	@set -e; for p in $(PACKAGES) $(EXAMPLES) tests; do \
		(cd $$p && $(BIN)/python -m pytest -q -m slow) || [ $$? -eq 5 ]; \
	done

# The main job: CAST on the built-in shapes world for a few minutes, base vs trained on the
# held-out hard prompts, and runs/demo-*/report.html.
DEMO_MINUTES ?= 6
demo: install
	$(BIN)/cast plugins
	$(BIN)/cast shapes demo --minutes $(DEMO_MINUTES)

bench: install
	$(BIN)/python benchmarks/cli_startup.py
	$(BIN)/python benchmarks/overhead.py
	$(BIN)/cast bench --quick

clean:
	rm -rf $(VENV) .pytest_cache
