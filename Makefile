# chainproxy — the commands of docs/OPERATIONS.md#running (a contract: only added to).
# Every target creates .venv on first use (Python 3.12) and installs the project.

SHELL := /bin/bash
CONFIG ?= configs/finney.yaml
# proxy processes behind one address (docs/OPERATIONS.md#scaling-out): >1 needs haproxy and redis-server
WORKERS ?= 1
VENV := .venv
PY := $(VENV)/bin/python
# python3.12 from PATH, else a pyenv or system install; it must really be 3.12.
PYTHON312 := $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12; do \
	$$p -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1 && { echo $$p; break; }; done)
STAMP := $(VENV)/.installed
# pytest worker processes of `make test` (pytest-xdist): the suite waits on its child
# processes much of the time, so three share this 2-core machine's work
# (docs/OPERATIONS.md, Tests); 0 runs it in one
TEST_WORKERS ?= 3

.PHONY: run test demo inspect lint explore bench clean help check-config

help:
	@echo "make run      proxy + sidecar on the public endpoints ($(CONFIG)), http://127.0.0.1:8080"
	@echo "              WORKERS=N: N proxy processes behind HAProxy, one quota in Redis"
	@echo "make demo     the same, offline, with simulated nodes (configs/demo.yaml)"
	@echo "make inspect  like run, under mitmweb (UI on http://127.0.0.1:8082)"
	@echo "make check-config  validate $(CONFIG) and say what it deploys (CONFIG=F for another)"
	@echo "make install  what running it needs, no test tools (a production host)"
	@echo "make test     the test suite"
	@echo "make lint     ruff and mypy"
	@echo "make explore  the property tests with 20x the random examples (hunts rare failures)"
	@echo "make bench    benchmarks (QUICK=1 for a short run)"
	@echo "make bench-real  real clients (async-substrate-interface) on chopsticks: upstream calls"
	@echo "make soak     chaos soak, SOAK_S seconds (600): figures into docs/RELIABILITY.md"
	@echo "make profile  py-spy profile of the proxy under load (bench/out/)"
	@echo "make test-clients     substrate-interface and polkadot.js over chopsticks"
	@echo "make demo-chopsticks  the stack over a real Substrate runtime (chopsticks), offline"
	@echo "make scale-deps       redis-server and haproxy (Debian packages) for WORKERS=N and its tests"

$(STAMP): pyproject.toml
	@test -n "$(PYTHON312)" || { echo "Python 3.12 not found: install python3.12" >&2; exit 1; }
	test -x $(PY) || $(PYTHON312) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $(STAMP) $(RUN_STAMP)

# The bytecode of the project's own modules, written ahead: where Python may not
# write it itself (PYTHONDONTWRITEBYTECODE set, as on CI images; a read-only
# checkout, as under the systemd units' ProtectSystem=strict) every process
# compiled them again at each start: ~0.6 s of CPU per proxy, ~0.3 s per sidecar,
# a quarter of what starting one costs. Only changed files are compiled again.
BYTECODE = $(PY) -m compileall -q -x /node_modules/ addon sidecar common chainproxy simnode bench tests

# What running it needs, and nothing the tests need (pytest, mypy, playwright…):
# `make install` on a production host; run/demo/inspect/check-config install only this.
RUN_STAMP := $(VENV)/.installed-run
.PHONY: install
install: $(RUN_STAMP)
	@$(BYTECODE)
$(RUN_STAMP): pyproject.toml
	@test -n "$(PYTHON312)" || { echo "Python 3.12 not found: install python3.12" >&2; exit 1; }
	test -x $(PY) || $(PYTHON312) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	@touch $(RUN_STAMP)

# PROXY_SET="chainproxy_lean=true …": mitmproxy options for the proxy (docs/CONFIGURATION.md, "mitmproxy options")
LAUNCH_SETS = $(foreach s,$(PROXY_SET),--set $(s))

# The `chainproxy` console script (chainproxy/cli.py) maps these onto
# `python -m chainproxy.launch`: demo adds --simulate, inspect adds --inspect (and
# --simulate when the config is a demo one). PROXY_HOST / PROXY_PORT set the address.
CHAINPROXY := $(VENV)/bin/chainproxy
# make demo runs configs/demo.yaml unless CONFIG names another demo config
DEMO_CONFIG := $(if $(findstring demo,$(CONFIG)),$(CONFIG),configs/demo.yaml)

run: $(RUN_STAMP)
	@$(BYTECODE)
	$(CHAINPROXY) run --config $(CONFIG) --workers $(WORKERS) $(LAUNCH_SETS)

demo: $(RUN_STAMP)
	@$(BYTECODE)
	$(CHAINPROXY) demo --config $(DEMO_CONFIG) --workers $(WORKERS) $(LAUNCH_SETS)

inspect: $(RUN_STAMP)
	@$(BYTECODE)
	$(CHAINPROXY) inspect --config $(CONFIG) --workers $(WORKERS) $(LAUNCH_SETS)

check-config: $(RUN_STAMP)
	$(CHAINPROXY) check-config $(CONFIG)

test: $(STAMP) js-deps browser-deps asi-deps scale-deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	@$(BYTECODE)
	$(PY) -m pytest -q -n $(TEST_WORKERS)

# The property tests (those with @given) with 20x their examples (the `explore`
# profile of tests/conftest.py, tests/examples.py for those that set a count):
# what `make test` would meet one run in many, found now.
EXPLORE_TESTS = $(shell grep -rl "@given" tests --include='test_*.py' | grep -v /e2e/ | sort)

explore: $(STAMP)
	CHAINPROXY_EXPLORE=1 $(PY) -m pytest -q -n $(TEST_WORKERS) -p no:cacheprovider --hypothesis-profile=explore $(EXPLORE_TESTS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) $(ASI_VENV) $(BT_VENV) data .pytest_cache .ruff_cache

# Proxy benchmarks against bare mitmdump, a direct call and nginx, plus the
# statistics, memory, addon and Redis benchmarks (docs/BENCHMARKS.md). ~30 min; QUICK=1 ~12 min;
# SMOKE=1: every scenario once at its smallest size. Exit 1 naming any scenario that failed.
bench: $(STAMP) bench-deps scale-deps js-deps asi-deps
	$(PY) bench/run.py $(if $(QUICK),--quick,) $(if $(SMOKE),--smoke,)

# Scenario 12 alone: async-substrate-interface clients syncing through chainproxy on
# chopsticks, upstream calls counted at the node (~1 min). CLIENTS=, BLOCKS= change the size.
.PHONY: bench-real
bench-real: $(STAMP) js-deps asi-deps
	$(PY) bench/real_client_sync.py --clients $(or $(CLIENTS),5) --blocks $(or $(BLOCKS),5)

# Mixed traffic for SOAK_S seconds while nodes, the sidecar, a proxy and Redis fail at
# random; figures printed and written into docs/RELIABILITY.md; exit 1 when a goal is missed.
SOAK_S ?= 600
.PHONY: soak
soak: $(STAMP) scale-deps
	$(PY) -m bench.soak --seconds $(SOAK_S) $(SOAK_ARGS)

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

# --- real clients over a real Substrate runtime (tests/clients, docs/OPERATIONS.md "Real clients") ---
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

# --- async-substrate-interface (bittensor's earlier WebSocket client) in a venv of its
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

# --- redis-server and haproxy for WORKERS=N (docs/OPERATIONS.md#scaling-out) and their tests ---
# Debian packages, installed when missing and we are root; otherwise the Redis and
# --workers tests are skipped, saying why. The tests (and the launcher) start their own
# on free loopback ports: the system services the packages start are stopped and disabled.
.PHONY: scale-deps
scale-deps:
	@missing=""; \
	{ command -v redis-server >/dev/null 2>&1 || test -x /usr/bin/redis-server || test -x /usr/sbin/redis-server; } \
		|| missing="$$missing redis-server"; \
	{ command -v haproxy >/dev/null 2>&1 || test -x /usr/sbin/haproxy || test -x /usr/bin/haproxy; } \
		|| missing="$$missing haproxy"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing$$missing (Debian packages) for WORKERS=N and the Redis/workers tests"; \
			apt-get update -qq && RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive \
				apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
			for svc in $$missing; do \
				service $$svc stop >/dev/null 2>&1 || true; \
				{ systemctl disable $$svc || update-rc.d $$svc disable; } >/dev/null 2>&1 || true; \
			done; \
		else echo "not installed:$$missing (not root): the Redis/workers tests will be skipped" >&2; fi; \
	fi
