# The two commands in the README do all the set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.profmagic-installed
# A Python 3.12 kernel for the tests of perf's Python names on a live kernel (the trampoline needs 3.12+).
PY312 ?= $(or $(shell ls $(HOME)/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | tail -1),$(shell command -v python3.12))
VENV312 := .venv312
STAMP312 := $(VENV312)/.profmagic-installed

.PHONY: setup system test demo bench clean

setup: $(STAMP) $(STAMP312) system

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev,memory,cluster]"
	touch $(STAMP)

$(STAMP312): pyproject.toml
	@if [ -n "$(PY312)" ]; then \
	  test -x $(VENV312)/bin/python || $(PY312) -m venv $(VENV312); \
	  $(VENV312)/bin/python -m pip install -q -e . ipykernel && touch $(STAMP312); \
	else echo "no python3.12 here: the Python 3.12 kernel tests will say so"; fi

system:
	bash scripts/setup-system.sh

# Two phases: the tests that time nothing on 2 workers (pytest-xdist, one file per worker at a time), then
# the timed ones (marker `timed`, tests/conftest.py) alone, so that nothing else competes for the CPU.
# The last line is both phases' total. TESTS=tests/test_x.py runs a part.
TESTS ?=
PYTEST := $(PY) -m pytest -q -rs --durations=30
test: setup
	@mkdir -p build && rm -f build/test-parallel.json build/test-timed.json
	@t0=$$(date +%s); \
	PROFMAGIC_TEST_COUNTS=$(CURDIR)/build/test-parallel.json $(PYTEST) -m "not timed" -n 2 --dist loadfile --no-loadscope-reorder $(TESTS); \
	p=$$?; t1=$$(date +%s); \
	PROFMAGIC_TEST_COUNTS=$(CURDIR)/build/test-timed.json $(PYTEST) -m timed $(TESTS); \
	t=$$?; t2=$$(date +%s); \
	$(PY) scripts/test_summary.py "parallel (not timed, 2 workers)" build/test-parallel.json $$p $$((t1 - t0)) \
	                              "serial (timed)" build/test-timed.json $$t $$((t2 - t1))

demo: setup
	$(PY) -m profmagic.demo

BENCH_ARGS ?=
bench: setup
	$(PY) bench/run_all.py $(BENCH_ARGS)

clean:
	rm -rf build .pytest_cache
