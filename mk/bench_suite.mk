# The breadth suite (bench/suite_bench.py): programs of many shapes, each
# linked against nothing but libc and run with every allocator
# LD_PRELOADed, beside the five workloads of bench/proc_bench.py and two
# real programs (sqlite3, lua5.4).  `make test` runs each program once at
# tiny sizes under glibc and scralloc (it must exit 0: the programs check
# every block's contents before freeing it), and checks the report's
# arithmetic on made-up runs; `make bench-process` runs the whole suite.

SUITE_PROGS := proc_rfc_churn proc_large_reuse proc_prodcons proc_handoff proc_phases proc_thread_swap \
  proc_random_small proc_runs proc_interp proc_mixed_queue proc_reuse proc_idle
# proc_bench.py's programs and the launcher named here too: mk/process.mk
# (which lists them) is read after this file.
SUITE_BIN := $(addprefix $(B)/release/bench/,$(SUITE_PROGS) proc_launch proc_xthread proc_churn)

# The breadth programs share bench/suite_prog.h, and proc_churn takes its
# rss_kib (mk/process.mk's pattern rule builds them; this adds the header
# as a prerequisite).
$(addprefix $(B)/release/bench/,$(SUITE_PROGS) proc_churn): bench/suite_prog.h

TEST_STEPS  += test-suite-quick
.PHONY: suite-bin test-suite-quick bench-suite
suite-bin: $(SUITE_BIN)

test-suite-quick: $(SUITE_BIN) $(B)/release/libscralloc.so
	$(PYTHON) tests/preload/suite_report_check.py
	$(PYTHON) bench/suite_bench.py --quick --lib $(B)/release/libscralloc.so --bin $(B)/release/bench

bench-suite: $(SUITE_BIN) $(B)/release/libscralloc.so $(B)/release/bench/bench_pairs
	$(PYTHON) bench/suite_bench.py --lib $(B)/release/libscralloc.so --bin $(B)/release/bench \
	  --markdown $(B)/bench/suite.md

# `make bench-process` runs the suite too (before proc_bench.py's own run).
bench-process: bench-suite
