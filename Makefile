# Two commands do all set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-1 lint unit integration postgres-test bench clean browser postgres prometheus

# Two stamps: $(STAMP) is orch and what it runs with (`make demo`); $(TEST_STAMP) adds the
# test, lint and type-check packages (`make test`, `make lint`), every file byte-compiled.
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

# uv installs the same wheels from the same indexes as pip (.ci/uv_flags.py hands it pip's
# configuration), much faster; pip does it where uv cannot be had. The venv is made without
# pip (ensurepip took 2.6-15 s here) and uv is put in it by this Python's pip; uv then installs
# pip there too. The CPU wheel of torch is pinned in the same resolution: an unpinned torch
# would pull a multi-GB CUDA build.
VENV_UV = { test -x $(BIN)/python || $(PYTHON) -m venv --without-pip $(VENV); } \
	&& { test -x $(BIN)/uv || $(PYTHON) -m pip --python $(BIN)/python install -q uv; } \
	&& flags="$$($(BIN)/python .ci/uv_flags.py $(PYTHON) -m pip)"
VENV_PIP = { test -x $(BIN)/python || $(PYTHON) -m venv --without-pip $(VENV); } \
	&& { test -x $(BIN)/pip || $(BIN)/python -m ensurepip -q; }
UV_INSTALL = $(BIN)/uv pip install -q -p $(BIN)/python $$flags pip torch==2.13.0

# `make demo`: no bytecode compiled at install (every file of every package: most of the
# install's time), only orch's own modules (an editable install leaves them as source: every
# `orch` and Ray process would compile them again) and the parts of Ray that `ray start` and
# its daemons import (770 files, 1-2 s here; each daemon compiled them anew as they started
# side by side: `orch local up` took 4-6 s longer in the 2 quieter of 4 pairs). The runner
# host is not started with -B: it writes what else it imports.
RAY_START_PARTS = _private dashboard autoscaler _common core util scripts runtime_env experimental
$(STAMP): pyproject.toml
	@echo "installing orch and the CPU build of torch into $(VENV)"
	{ $(VENV_UV) && $(UV_INSTALL) -e .; } \
	|| { $(VENV_PIP) && $(BIN)/pip install -q --no-compile torch==2.13.0 -e .; }
	r="$$($(BIN)/python -c 'import importlib.util as u; print(u.find_spec("ray").submodule_search_locations[0])')" \
	&& $(BIN)/python -m compileall -q -j0 -x '/(tests?|testing)/' orchestrator providers jobs \
	   $(addprefix "$$r"/,$(RAY_START_PARTS))
	touch $(STAMP)

# `make test`: everything byte-compiled as it installs (--compile-bytecode, as pip does):
# the suite's Ray workers run with -B, and without .pyc files each one compiled torch anew
# (the suite took 1.6x as long). After `make demo`, what it installed is compiled here, all of
# it as uv does (a file a package ships for a newer Python, torch has one, is left as it is).
$(TEST_STAMP): pyproject.toml
	{ $(VENV_UV) && $(UV_INSTALL) --compile-bytecode -e '.[test]'; } \
	|| { $(VENV_PIP) && $(BIN)/pip install -q torch==2.13.0 -e '.[test]'; }
	test ! -e $(STAMP) || $(BIN)/python -m compileall -qq -j0 \
	  "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || :
	$(BIN)/python -m compileall -q orchestrator providers jobs
	touch $(STAMP) $(TEST_STAMP)

# The status page's browser test needs chromium and chromedriver: installed here when they are
# missing and this is root with apt-get; otherwise one line says why that test will skip.
# Never fails the build.
CHROMEDRIVER ?= chromedriver
APT_CHROMIUM = DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver
browser:
	@skip="status page browser test will be skipped:"; \
	if command -v $(CHROMEDRIVER) >/dev/null && { command -v chromium || command -v chromium-browser \
	    || command -v google-chrome; } >/dev/null; then :; \
	elif [ "$$(id -u)" != 0 ]; then \
	  echo "$$skip no chromium/chromedriver, and installing them needs root (apt-get install chromium chromium-driver)"; \
	elif ! command -v apt-get >/dev/null; then \
	  echo "$$skip no chromium/chromedriver, and no apt-get to install them"; \
	else \
	  log="$${TMPDIR:-/tmp}/orch-apt-chromium.log"; \
	  echo "installing chromium and chromium-driver (apt-get) for the status page browser test"; \
	  { $(APT_CHROMIUM) || { apt-get update -qq && $(APT_CHROMIUM); }; } >"$$log" 2>&1 \
	    || echo "$$skip apt-get install chromium chromium-driver failed (see $$log)"; \
	fi

# The store-backed tests run on PostgreSQL too (`pytest --store both`; tests/conftest.py): on a
# server the tests start from this machine's PostgreSQL binaries, installed here with apt
# when they are missing and this is root; otherwise that pass skips, saying why.
APT_POSTGRES = DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql
postgres:
	@skip="PostgreSQL store tests will be skipped:"; \
	if command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" != 0 ]; then \
	  echo "$$skip no PostgreSQL server binaries, and installing them needs root (apt-get install postgresql)"; \
	elif ! command -v apt-get >/dev/null; then \
	  echo "$$skip no PostgreSQL server binaries, and no apt-get to install them"; \
	else \
	  log="$${TMPDIR:-/tmp}/orch-apt-postgresql.log"; \
	  echo "installing postgresql (apt-get) for the PostgreSQL store tests"; \
	  { $(APT_POSTGRES) || { apt-get update -qq && $(APT_POSTGRES); }; } >"$$log" 2>&1 \
	    || echo "$$skip apt-get install postgresql failed (see $$log)"; \
	fi

# `orch serve`'s /metrics test scrapes a server with a real Prometheus and checks its output
# with promtool: Debian's prometheus package has both, installed here the same way.
APT_PROMETHEUS = DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus
prometheus:
	@skip="Prometheus /metrics test will be skipped:"; \
	if command -v prometheus >/dev/null && command -v promtool >/dev/null; then :; \
	elif [ "$$(id -u)" != 0 ]; then \
	  echo "$$skip no prometheus/promtool, and installing them needs root (apt-get install prometheus)"; \
	elif ! command -v apt-get >/dev/null; then \
	  echo "$$skip no prometheus/promtool, and no apt-get to install them"; \
	else \
	  log="$${TMPDIR:-/tmp}/orch-apt-prometheus.log"; \
	  echo "installing prometheus (apt-get) for the /metrics test"; \
	  { $(APT_PROMETHEUS) || { apt-get update -qq && $(APT_PROMETHEUS); }; } >"$$log" 2>&1 \
	    || echo "$$skip apt-get install prometheus failed (see $$log)"; \
	fi

# Ray starts its workers with -B: what the runner host's warm processes import (torch, Ray
# Train: jobs/host.py's preload) is compiled by a process of its own while the local Ray
# starts, once for this .venv (then the host's own imports find it compiled too). The exit
# status is the job's: that compile only saves time.
demo: $(STAMP)
	{ test -e $(VENV)/.compiled-warm || { env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -c \
	  'from jobs.host import preload; preload()' && touch $(VENV)/.compiled-warm; }; } & \
	$(BIN)/orch submit examples/quickstart.yaml; s=$$?; wait $$!; exit $$s

# Lint (ruff) and the type check (mypy, over orchestrator/, providers/ and jobs/) come first:
# both take seconds and say what to fix by file and line.
lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# The whole suite in one run on three processes (pytest-xdist) on CI's two cores: the
# suite's tests wait for jobs a fifth of their time, which a third process fills (two left
# the CPUs idle 22% of the run). The store-backed tests run on SQLite and again on
# PostgreSQL (BOTH_STORES in tests/conftest.py): each shared Ray's tests run in one of the
# processes, the other tests go to whichever is free (tests/scheduling.py). The type check
# runs beside the suite's start (10 s from cold; its lines come first, its failure fails
# the target); the lint, a second, before.
# PYTHONDONTWRITEBYTECODE is left out of the suite's environment, where it is set: pytest then
# keeps the modules it rewrote for their asserts (the tests, hypothesis, schemathesis), and
# the next run's processes read them instead of spending 8 s each rewriting them again.
# `make test-1` runs the same in one process.
PYTEST = env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest
TEST_PROCESSES ?= 3
test: $(TEST_STAMP) browser postgres prometheus
	$(BIN)/ruff check .
	$(BIN)/mypy & m=$$!; $(PYTEST) -n $(TEST_PROCESSES) --store both tests --durations=20; \
	s=$$?; wait $$m || s=1; exit $$s

test-1: $(TEST_STAMP) browser postgres prometheus lint
	$(PYTEST) --store both tests --durations=20

postgres-test: $(TEST_STAMP) postgres
	$(PYTEST) --store postgresql tests

unit: $(TEST_STAMP)
	$(PYTEST) tests -m "not integration"

integration: $(TEST_STAMP) browser prometheus
	$(PYTEST) tests -m integration

clean:
	rm -rf $(VENV) build *.egg-info
