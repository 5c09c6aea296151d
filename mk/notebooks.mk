# Notebooks (examples/notebooks/, issue 33).
#
#   make figures   runs the two notebooks whose plots the README shows
#                  (page retention, hoarding) at full size, with the release
#                  extension built in place, and saves the plots under
#                  docs/img/ and the executed notebooks under
#                  build/notebooks/ (the notebooks themselves are committed
#                  without outputs)
#
# tests/python/test_notebooks.py runs every notebook at its CI size in
# test-python; the programs they run under LD_PRELOAD are built first, so
# that no notebook spends its time budget compiling.

NOTEBOOK_FIGURES := examples/notebooks/1_page_retention.ipynb examples/notebooks/2_hoarding.ipynb

.PHONY: figures
test-python: $(B)/release/libscralloc.so $(B)/release/bench/proc_rfc_churn

figures: python-release $(B)/release/libscralloc.so $(B)/release/bench/proc_rfc_churn
	PYTHONPATH=$(PY_PKG_DIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) examples/notebooks/execute.py \
	  --figures docs/img $(NOTEBOOK_FIGURES)
