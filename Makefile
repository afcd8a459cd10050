# chainproxy — the commands of DESIGN.md section 2.
# Every target creates .venv on first use (Python 3.12) and installs the project.

SHELL := /bin/bash
CONFIG ?= configs/finney.yaml
VENV := .venv
PY := $(VENV)/bin/python
# python3.12 from PATH, else a pyenv or system install; it must really be 3.12.
PYTHON312 := $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12; do \
	$$p -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1 && { echo $$p; break; }; done)
STAMP := $(VENV)/.installed

.PHONY: run test demo inspect lint bench clean help

help:
	@echo "make run      proxy + sidecar on the public endpoints ($(CONFIG)), http://127.0.0.1:8080"
	@echo "make demo     the same, offline, with simulated nodes (configs/demo.yaml)"
	@echo "make inspect  like run, under mitmweb (UI on http://127.0.0.1:8082)"
	@echo "make test     the test suite"
	@echo "make lint     ruff"
	@echo "make bench    benchmarks (QUICK=1 for a short run)"
	@echo "make profile  py-spy profile of the proxy under load (bench/out/)"
	@echo "make test-clients     substrate-interface and polkadot.js over chopsticks"
	@echo "make demo-chopsticks  the stack over a real Substrate runtime (chopsticks), offline"

$(STAMP): pyproject.toml
	@test -n "$(PYTHON312)" || { echo "Python 3.12 not found: install python3.12" >&2; exit 1; }
	test -x $(PY) || $(PYTHON312) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $(STAMP)

# PROXY_SET="chainproxy_lean=true …": mitmproxy options for the proxy (README "Performance")
LAUNCH_SETS = $(foreach s,$(PROXY_SET),--set $(s))

run: $(STAMP)
	$(PY) -m chainproxy.launch --config $(CONFIG) $(LAUNCH_SETS)

demo: $(STAMP)
	$(PY) -m chainproxy.launch --config configs/demo.yaml --simulate $(LAUNCH_SETS)

inspect: $(STAMP)
	$(PY) -m chainproxy.launch --config $(CONFIG) --inspect $(if $(findstring demo,$(CONFIG)),--simulate,) $(LAUNCH_SETS)

test: $(STAMP) js-deps browser-deps asi-deps
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) $(ASI_VENV) $(BT_VENV) data .pytest_cache .ruff_cache

# Proxy benchmarks against bare mitmdump, a direct call and nginx, plus the
# statistics, memory and addon benchmarks (docs/BENCHMARKS.md). ~9 min; QUICK=1 < 2 min.
bench: $(STAMP) bench-deps
	$(PY) bench/run.py $(if $(QUICK),--quick,)

# Where the proxy's CPU goes under load (py-spy): PROFILE_ARGS="--path hit", "--lean", "--bare".
.PHONY: profile
profile: $(STAMP) bench-deps
	$(PY) bench/profile.py $(PROFILE_ARGS)

# wrk (load generator) and nginx with its stream module (reference proxy, round-robin
# baseline, TCP balancer): Debian packages, installed when missing and we are root.
# Without them the runner falls back to bench/pyload.py and skips the nginx parts.
.PHONY: bench-deps
bench-deps: $(VENV)/.bench-installed
	@missing=""; \
	command -v wrk >/dev/null 2>&1 || missing="$$missing wrk"; \
	{ command -v nginx >/dev/null 2>&1 || test -x /usr/sbin/nginx; } || missing="$$missing nginx"; \
	test -e /usr/lib/nginx/modules/ngx_stream_module.so || missing="$$missing libnginx-mod-stream"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing$$missing (Debian packages) for the benchmarks"; \
			apt-get update -qq && RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive \
				apt-get install -y -qq $$missing >/dev/null; \
			case "$$missing" in *nginx*) service nginx stop >/dev/null 2>&1 || true;; esac; \
		else echo "not installed:$$missing (not root): the benchmarks use what is there" >&2; fi; \
	fi

$(VENV)/.bench-installed: $(STAMP)
	$(PY) -m pip install -q -e '.[bench]'
	@touch $@

# --- real clients over a real Substrate runtime (tests/clients, README "Real clients") ---
# npm packages (chopsticks, polkadot.js): `npm ci` only when node_modules is missing or
# the lock changed. --ignore-scripts: chopsticks' sqlite3 build is not needed without --db.
# Without npm the client tests are skipped (pytest says why), so `make test` still runs.
JS_DIR := tests/clients/js
JS_STAMP := $(JS_DIR)/node_modules/.chainproxy-installed

.PHONY: js-deps test-clients demo-chopsticks

$(JS_STAMP): $(JS_DIR)/package-lock.json $(JS_DIR)/package.json
	@if command -v npm >/dev/null 2>&1; then \
		cd $(JS_DIR) && npm ci --ignore-scripts --no-audit --no-fund && touch node_modules/.chainproxy-installed; \
	else echo "npm not found: the real-client tests (tests/clients) will be skipped" >&2; fi

js-deps: $(JS_STAMP)

test-clients: $(STAMP) js-deps
	$(PY) -m pytest -q tests/clients

demo-chopsticks: $(STAMP) js-deps
	$(PY) -m tests.clients.chopsticks_stack

# --- async-substrate-interface (the bittensor SDK's WebSocket client) in a venv of its
# own: its cyscale installs a `scalecodec` that would replace substrate-interface's.
# Without it (no package index) its test is skipped, saying why.
ASI_VENV := .venv-asi
ASI_REQS := tests/clients/asi/requirements.txt

.PHONY: asi-deps
asi-deps: $(ASI_VENV)/.installed

$(ASI_VENV)/.installed: $(ASI_REQS)
	@test -n "$(PYTHON312)" || { echo "Python 3.12 not found" >&2; exit 1; }
	@if { test -x $(ASI_VENV)/bin/python || $(PYTHON312) -m venv $(ASI_VENV); } && \
		$(ASI_VENV)/bin/python -m pip install -q -r $(ASI_REQS); then touch $@; \
	else echo "async-substrate-interface not installed: its client test will be skipped" >&2; \
		rm -rf $(ASI_VENV); fi

# --- the bittensor SDK (PyPI) in a venv of its own, for its subscription test over
# chopsticks (tests/clients/test_subscriptions_bittensor.py). Without it (no package
# index) that test is skipped, saying why.
BT_VENV := .venv-bt
BT_REQS := tests/clients/bt/requirements.txt

.PHONY: bt-deps
test: bt-deps
bt-deps: $(BT_VENV)/.installed

$(BT_VENV)/.installed: $(BT_REQS)
	@test -n "$(PYTHON312)" || { echo "Python 3.12 not found" >&2; exit 1; }
	@if { test -x $(BT_VENV)/bin/python || $(PYTHON312) -m venv $(BT_VENV); } && \
		$(BT_VENV)/bin/python -m pip install -q -r $(BT_REQS); then touch $@; \
	else echo "bittensor not installed: its subscription test will be skipped" >&2; \
		rm -rf $(BT_VENV); fi

# --- headless Chromium for the dashboard's browser test (Debian's package) ---
# Installed when missing and we are root (CI, fresh machines); otherwise the
# browser test is skipped and pytest says why.
.PHONY: browser-deps
browser-deps:
	@if ! command -v chromium >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing chromium (Debian package) for the dashboard browser test"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
		else echo "chromium not found and not root: the browser test will be skipped" >&2; fi; \
	fi

# --- promtool (Debian's prometheus package) and systemd-analyze for the deploy/ tests ---
# Installed when missing and we are root; otherwise those tests are skipped, saying why.
# Only promtool is wanted: the Prometheus server the package brings is stopped again.
.PHONY: deploy-deps
test: deploy-deps
deploy-deps:
	@missing=""; \
	command -v promtool >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v systemd-analyze >/dev/null 2>&1 || missing="$$missing systemd"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing$$missing (Debian packages) for the deploy/ tests"; \
			apt-get update -qq && RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive \
				apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
			case "$$missing" in *prometheus*) service prometheus stop >/dev/null 2>&1 || true;; esac; \
		else echo "not installed:$$missing (not root): the deploy/ tests that need them are skipped" >&2; fi; \
	fi
