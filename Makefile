# Two commands do all set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test unit integration bench clean browser

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU wheel first: an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
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

demo: $(STAMP)
	$(BIN)/orch submit examples/quickstart.yaml

test: $(STAMP) browser
	$(BIN)/python -m pytest tests

unit: $(STAMP)
	$(BIN)/python -m pytest tests -m "not integration"

integration: $(STAMP) browser
	$(BIN)/python -m pytest tests -m integration

clean:
	rm -rf $(VENV) build *.egg-info
