# Two commands do all set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-1 lint unit integration postgres-test bench clean browser postgres prometheus

# uv installs the same wheels from the same indexes as pip (.ci/uv_flags.py hands it pip's
# configuration), much faster; pip does it where uv cannot be had. --compile-bytecode as pip
# does: Ray starts its workers with -B, so without .pyc files each one compiled torch anew,
# and the suite took 1.6x as long.
# The CPU wheel of torch first: an unpinned torch would pull a multi-GB CUDA build. orch's own
# modules compiled too (an editable install leaves them as source): every `orch` and Ray
# worker process the tests start would compile them again, about 0.1 s each.
UV_INSTALL = $(BIN)/uv pip install -q --compile-bytecode -p $(BIN)/python
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	{ $(BIN)/pip install -q uv && flags="$$($(BIN)/python .ci/uv_flags.py $(BIN)/pip)" \
	  && $(UV_INSTALL) $$flags torch==2.13.0 && $(UV_INSTALL) $$flags -e '.[test]'; } \
	|| { $(BIN)/pip install -q --upgrade pip && $(BIN)/pip install -q torch==2.13.0 \
	     && $(BIN)/pip install -q -e '.[test]'; }
	$(BIN)/python -m compileall -q orchestrator providers jobs
	touch $(STAMP)

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

demo: $(STAMP)
	$(BIN)/orch submit examples/quickstart.yaml

# Lint (ruff) and the type check (mypy, over orchestrator/, providers/ and jobs/) come first:
# both take seconds and say what to fix by file and line.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# The whole suite in one run on two processes (pytest-xdist), the store-backed tests on
# SQLite and again on PostgreSQL (BOTH_STORES in tests/conftest.py): each shared Ray's tests
# run in one of the processes, the other tests go to whichever is free (tests/scheduling.py).
# PYTHONDONTWRITEBYTECODE is left out of the suite's environment, where it is set: pytest then
# keeps the modules it rewrote for their asserts (the tests, hypothesis, schemathesis), and
# the next run's processes read them instead of spending 8 s each rewriting them again.
# `make test-1` runs the same in one process.
PYTEST = env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest
test: $(STAMP) browser postgres prometheus lint
	$(PYTEST) -n 2 --store both tests --durations=20

test-1: $(STAMP) browser postgres prometheus lint
	$(PYTEST) --store both tests --durations=20

postgres-test: $(STAMP) postgres
	$(PYTEST) --store postgresql tests

unit: $(STAMP)
	$(PYTEST) tests -m "not integration"

integration: $(STAMP) browser prometheus
	$(PYTEST) tests -m integration

clean:
	rm -rf $(VENV) build *.egg-info
