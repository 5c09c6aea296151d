# Python binding (issue 3): the checked extension and its tests.
#
#   make test-python   build the package with the core's validators on
#                      (SCR_DEBUG=3, -O1 -g) into build/python/debug-lib and
#                      run pytest on tests/python with that directory first
#                      on PYTHONPATH (Hypothesis CI profile: deterministic,
#                      bounded); SCRALLOC_HYPOTHESIS_LONG=1 runs it long
#   make python        the same checked build, without the tests
#   make bench-python  the seed's table (200,000 pairs, retain 0 and 1),
#                      with the release extension built in place, then
#                      bench/python_heap_bench.py (serve_python against
#                      pymalloc and PYTHONMALLOC=malloc)
#   make test-python-slice  the release extension, packaged apart in
#                      build/python/release-pkg, runs CPython's regression
#                      slice under serve_python (tests/python/test_cpython_slice.py)
#
# The checked build never goes into the source tree: only a release
# extension is ever built in place (bench-python, `pip install -e .`), so an
# editable install cannot pick up the checked one.  build_py copies the
# package's Python files next to the checked extension, so
# build/python/debug-lib is a whole package.

PY_PKG_DIR := bindings/python
PY_BUILD   := $(B)/python
PY_DEBUG_LIB := $(PY_BUILD)/debug-lib

.PHONY: python python-release test-python bench-python
TEST_STEPS  += test-python
BENCH_STEPS += bench-python

python:
	rm -rf $(PY_DEBUG_LIB)/scralloc/*.py $(PY_DEBUG_LIB)/scralloc/*.pyi
	SCRALLOC_DEBUG_BUILD=1 SCRALLOC_WERROR=1 $(PYTHON) setup.py -q build_py --build-lib $(PY_DEBUG_LIB) \
	  build_ext --build-temp $(PY_BUILD)/debug --build-lib $(PY_DEBUG_LIB)

python-release:
	SCRALLOC_DEBUG_BUILD=0 $(PYTHON) setup.py -q build_ext --inplace --force \
	  --build-temp $(PY_BUILD)/release --build-lib $(PY_BUILD)/release-lib

test-python: python $(B)/release/libscralloc.so
	PYTHONPATH=$(PY_DEBUG_LIB)$${PYTHONPATH:+:$$PYTHONPATH} SCRALLOC_EXPECT_DEBUG=1 \
	  $(PYTHON) -m pytest -q -p no:cacheprovider tests/python

bench-python: python-release
	PYTHONPATH=$(PY_PKG_DIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) examples/seed_table.py
	PYTHONPATH=$(PY_PKG_DIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) bench/python_heap_bench.py

# The release extension beside a copy of the package, so the in-place
# (checked) build the other steps use stays as it is.
PY_REL_PKG := $(PY_BUILD)/release-pkg
.PHONY: test-python-slice
TEST_STEPS += test-python-slice
test-python-slice:
	SCRALLOC_DEBUG_BUILD=0 $(PYTHON) setup.py -q build_ext --force \
	  --build-temp $(PY_BUILD)/release --build-lib $(PY_BUILD)/release-lib
	rm -rf $(PY_REL_PKG) && mkdir -p $(PY_REL_PKG)/scralloc
	cp $(PY_PKG_DIR)/scralloc/*.py $(PY_PKG_DIR)/scralloc/*.pyi $(PY_PKG_DIR)/scralloc/py.typed \
	  $(PY_BUILD)/release-lib/scralloc/_scralloc*.so $(PY_REL_PKG)/scralloc/
	PYTHONPATH=$(PY_REL_PKG) $(PYTHON) -m pytest -q -p no:cacheprovider tests/python/test_cpython_slice.py
