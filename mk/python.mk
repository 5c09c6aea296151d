# Python binding (issue 3): the checked extension and its tests.
#
#   make test-python   build scralloc._scralloc in place with the core's
#                      validators on (SCR_DEBUG=3, -O1 -g) and run pytest on
#                      tests/python (Hypothesis CI profile: deterministic,
#                      bounded); SCRALLOC_HYPOTHESIS_LONG=1 runs it long
#   make python        the same in-place checked build, without the tests
#   make bench-python  the seed's table (200,000 pairs, retain 0 and 1),
#                      with the release extension built in place
#
# The in-place extension lands in bindings/python/scralloc/; the tests put
# bindings/python first on sys.path, so they use it even if a release
# `pip install .` is present.  --force: the debug and release builds share
# one output name, so never trust a stale one.

PY_PKG_DIR := bindings/python
PY_BUILD   := $(B)/python

.PHONY: python python-release test-python bench-python
TEST_STEPS  += test-python
BENCH_STEPS += bench-python

python:
	SCRALLOC_DEBUG_BUILD=1 SCRALLOC_WERROR=1 $(PYTHON) setup.py -q build_ext --inplace --force \
	  --build-temp $(PY_BUILD)/debug --build-lib $(PY_BUILD)/debug-lib

python-release:
	SCRALLOC_DEBUG_BUILD=0 $(PYTHON) setup.py -q build_ext --inplace --force \
	  --build-temp $(PY_BUILD)/release --build-lib $(PY_BUILD)/release-lib

test-python: python
	PYTHONPATH=$(PY_PKG_DIR)$${PYTHONPATH:+:$$PYTHONPATH} SCRALLOC_EXPECT_DEBUG=1 \
	  $(PYTHON) -m pytest -q -p no:cacheprovider tests/python

bench-python: python-release
	PYTHONPATH=$(PY_PKG_DIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) examples/seed_table.py
