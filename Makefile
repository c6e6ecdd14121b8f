# GhostViewer — two commands for a new user: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-ray-cluster demo lint setup clean-venv screenshots benchmarks package

$(STAMP): pyproject.toml setup.py ghostviewer/engine/tracing/_fast_stats.c
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# The exact CPU wheel is named only here; pyproject keeps a range so users can bring their own build.
	# --no-compile: Python compiles the modules it imports on first use; compiling all of torch up front is
	# half the setup's CPU time (measured: 115 → 50 CPU-s for the whole venv).
	$(BIN)/python -m pip install -q --no-compile "$(TORCH_SPEC)" -e ".[test,ray]"
	touch $(STAMP)

setup: $(STAMP)

# Bytecode is written (PYTHONDONTWRITEBYTECODE, set on some machines, is lifted for these recipes): the venv is
# installed with --no-compile, so without it every process would compile torch, diffusers and transformers from
# source again — measured on a clean clone: 35 CPU-s of collection per test worker instead of 20, and each CLI,
# engine or repro subprocess of the suite 1.5-2x its cost. The first import of a module writes its .pyc, once.
PY_ENV := env -u PYTHONDONTWRITEBYTECODE

run: $(STAMP)
	$(PY_ENV) $(BIN)/ghostviewer

# In parallel (pytest-xdist; TEST_WORKERS=0 runs it serially). Timing-sensitive tests run one at a time in the
# "timing" xdist_group, the windows driving the real engine in the "live-engine" one (tests/conftest.py); each
# worker's torch keeps to one thread.
TEST_WORKERS ?= auto
test: $(STAMP)
	$(PY_ENV) QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# Sweeps on a real multi-node Ray cluster started on this machine (a head and one-CPU worker nodes on loopback
# ports): a node killed mid-sweep, every node lost then a resume, a poisoned device and an out-of-memory. About
# 2.5 min and 100 CPU-s on 2 cores (each worker process imports torch), so not part of `make test` or CI.
test-ray-cluster: $(STAMP)
	$(PY_ENV) GHOSTVIEWER_RAY_CLUSTER=1 OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -p no:xdist tests/engine/test_sweep_ray_cluster.py

demo: $(STAMP)
	$(PY_ENV) $(BIN)/ghostviewer demo

lint: $(STAMP)
	$(BIN)/ruff check ghostviewer tests scripts benchmarks

benchmarks: $(STAMP)
	$(BIN)/python benchmarks/demo_speed.py
	$(BIN)/python benchmarks/trace_overhead.py
	$(BIN)/python benchmarks/false_alarms.py
	$(BIN)/python benchmarks/replay_speed.py
	$(BIN)/python benchmarks/bisect_budget.py
	$(BIN)/python benchmarks/sweep_throughput.py
	$(BIN)/python benchmarks/silent_ghosts.py
	QT_QPA_PLATFORM=offscreen $(BIN)/python benchmarks/gui_stall.py

screenshots: $(STAMP)
	$(BIN)/python scripts/screenshots.py

# The double-click desktop app: dist/GhostViewer/ (PyInstaller), started once under Xvfb for a screenshot and
# its start time. Minutes of CPU; not part of `make test`. Then: python packaging/install_launcher.py
package: $(STAMP)
	VENV=$(VENV) nice -n 10 packaging/build.sh

clean-venv:
	rm -rf $(VENV)
