# The breadth suite (bench/suite_bench.py): programs of many shapes, each
# linked against nothing but libc and run with every allocator
# LD_PRELOADed (bench/proc_%.c builds through mk/process.mk's rule).

SUITE_BIN := $(B)/release/bench/proc_rfc_churn
.PHONY: suite-bin
suite-bin: $(SUITE_BIN) $(B)/release/bench/proc_launch
