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

$(STAMP): pyproject.toml
	@test -n "$(PYTHON312)" || { echo "Python 3.12 not found: install python3.12" >&2; exit 1; }
	test -x $(PY) || $(PYTHON312) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $(STAMP)

run: $(STAMP)
	$(PY) -m chainproxy.launch --config $(CONFIG)

demo: $(STAMP)
	$(PY) -m chainproxy.launch --config configs/demo.yaml --simulate

inspect: $(STAMP)
	$(PY) -m chainproxy.launch --config $(CONFIG) --inspect $(if $(findstring demo,$(CONFIG)),--simulate,)

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) data .pytest_cache .ruff_cache

bench: $(STAMP)
	$(PY) bench/bench_stats.py $(if $(QUICK),--quick,)
