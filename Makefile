# The two commands in the README do all the set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.profmagic-installed

.PHONY: setup system test demo bench clean

setup: $(STAMP) system

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev,memory,cluster]"
	touch $(STAMP)

system:
	bash scripts/setup-system.sh

test: setup
	$(PY) -m pytest -q -rs

demo: setup
	$(PY) -m profmagic.demo

BENCH_ARGS ?=
bench: setup
	$(PY) bench/run_all.py $(BENCH_ARGS)

clean:
	rm -rf build .pytest_cache
