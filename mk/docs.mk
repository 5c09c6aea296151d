# Documentation: the examples of README.md and docs/*.md run as written, and
# the README's benchmark tables come from the benchmarks.
#
#   make test-docs       run every fenced example (tests/docs/run_examples.py:
#                        Python as doctests, Lua and C as programs, sh and
#                        console transcripts), against the checked builds
#   make readme-tables   run the benchmarks and replace the README's tables
#                        between their <!-- bench:NAME --> markers
#                        (bench/update_readme.py); ROUNDS=N rounds each,
#                        QUICK=1 less work per round, ONLY="process pairs"

.PHONY: test-docs readme-tables
TEST_STEPS += test-docs

test-docs: python lua $(B)/debug/libscralloc.a $(B)/release/libscralloc.so $(B)/release/bench/bench_pairs \
  $(B)/release/bench/proc_reuse $(B)/release/bench/proc_idle
	@echo "== docs: every example of README.md and docs/*.md"
	$(PYTHON) tests/docs/run_examples.py
	@echo "== docs: make readme-tables replaces the README's tables and nothing else"
	$(PYTHON) tests/docs/check_readme_tables.py

readme-tables:
	$(PYTHON) bench/update_readme.py $(if $(ROUNDS),--rounds $(ROUNDS)) $(if $(QUICK),--quick) \
	  $(if $(ONLY),--only $(ONLY))
