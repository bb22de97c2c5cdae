# The two commands a newcomer needs:
#   make demo   set up a virtual environment from nothing and optimize an example kernel on the simulator
#   make test   set up everything the tests need and run every test
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test setup sandbox-deps lint typecheck pytest extension-test clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip >/dev/null
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

# The sandbox's OS isolation (Linux): bubblewrap. Installed when missing and we may (root with
# apt-get, as in CI); elsewhere a note says what to install, and the tool says at start what it lacks.
sandbox-deps:
	@command -v bwrap >/dev/null 2>&1 || case "$$(uname -s)" in \
	  Linux) if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
	    else echo "note: install bubblewrap (e.g. sudo apt-get install bubblewrap) to isolate kernels at the OS level"; fi ;; \
	  *) echo "note: no OS-level sandbox on $$(uname -s); see SECURITY.md" ;; \
	esac

setup: $(STAMP) sandbox-deps

# A small budget so the demo finishes in a few minutes on a laptop; drop the flags for the
# published defaults (B=6, N=12, K=2, T=16).
demo: setup
	$(VENV)/bin/accelopt profile kernels_examples/silu.py --kernel silu_kernel
	$(VENV)/bin/accelopt optimize kernels_examples/silu.py --kernel silu_kernel --agents offline \
		--iterations 3 --beam 2 --plans 4 --samples 1 --seeds 3 --memory .cache/demo-memory.sqlite \
		--out accelopt-out/demo

# ruff, and the layer contracts in pyproject.toml ([tool.importlinter]).
lint: setup
	$(VENV)/bin/ruff check server tests benchmarks kernels_examples nkibench
	$(VENV)/bin/lint-imports

# mypy over server/accelopt (configuration: [tool.mypy] in pyproject.toml).
typecheck: setup
	$(VENV)/bin/mypy

# One BLAS thread: tests that emulate in-process run many small matmuls, which threads only slow down.
pytest: setup
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $(VENV)/bin/pytest -q -p no:cacheprovider

extension-test: setup
	@if [ -f extension/package.json ] || grep -q '"vscode"' package.json; then ./scripts/extension_test.sh; fi

test: lint typecheck pytest extension-test

clean:
	rm -rf $(VENV) node_modules out dist

editor-e2e: ; ./scripts/editor_e2e.sh
