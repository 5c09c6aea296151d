# The process allocator (core/src/process/): the direction of its layers
# (tests/tools/process_layers.py: a new cycle, a call up or a core internal
# outside its CORE_ALLOWED list fails), its tests in the ThreadSanitizer
# build (the Makefile's test-c already runs tests/c/test_process_*.c in the
# debug and ASan+UBSan builds), real programs under LD_PRELOAD, and the
# whole-program benchmark against glibc, jemalloc, mimalloc and tcmalloc.

PROC_TESTS := $(patsubst tests/c/%.c,%,$(wildcard tests/c/test_process_*.c))
$(foreach t,$(PROC_TESTS),$(eval $(call ctest,tsan,$(t),$(TSAN_FLAGS))))
# The fuzz test also against the release build (-O2, no validators): the
# lock-free paths as they ship.
$(eval $(call ctest,release,test_process_fuzz,$(REL_FLAGS)))

TEST_STEPS  += test-process
BENCH_STEPS += bench-process bench-pairs bench-replay
.PHONY: test-process test-process-layers test-process-tsan test-process-release test-preload bench-process bench-pairs bench-replay

test-process: test-process-layers test-process-tsan test-process-release test-preload

test-process-layers:
	@echo "== the process allocator's layers (tests/tools/process_layers.py)"; $(PYTHON) tests/tools/process_layers.py

test-process-release: $(B)/release/tests/test_process_fuzz
	@echo "== release test_process_fuzz"; SCR_FUZZ_ROUNDS=24 $(B)/release/tests/test_process_fuzz

test-process-tsan: $(foreach t,$(PROC_TESTS),$(B)/tsan/tests/$(t))
	@set -e; for t in $(PROC_TESTS); do \
	  echo "== tsan $$t"; TSAN_OPTIONS="halt_on_error=1 exitcode=66" $(B)/tsan/tests/$$t; \
	done

$(B)/release/tests/override_check: tests/preload/override_check.c tests/preload/preload_check.h
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O1 -Wall -Wextra $(WERROR) -o $@ $< -ldl
$(B)/release/tests/thread_exit_check: tests/preload/thread_exit_check.c tests/preload/preload_check.h core/include/scralloc.h
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O1 -Wall -Wextra $(WERROR) -Icore/include -pthread -o $@ $< -ldl

# python3's malloc calls recorded (a tracer for LD_PRELOAD) and replayed
# under each allocator on the same interleavings of its threads.
REPLAY_BIN := $(B)/release/bench/libmalloc_trace.so $(B)/release/bench/malloc_replay
$(B)/release/bench/libmalloc_trace.so: bench/malloc_trace.c bench/malloc_trace.h
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O2 -Wall -Wextra $(WERROR) -fPIC -shared -pthread -o $@ $< -ldl
$(B)/release/bench/malloc_replay: bench/malloc_replay.c bench/malloc_trace.h
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O2 -Wall -Wextra $(WERROR) -pthread -o $@ $< -lm

# One misuse of malloc per run (tests/preload/misuse_check.c), as death tests.
$(B)/release/tests/misuse_check: tests/preload/misuse_check.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O1 -Wall -Wextra $(WERROR) -pthread -o $@ $< -ldl

test-preload: $(B)/release/libscralloc.so $(B)/debug/libscralloc.so $(B)/release/tests/override_check $(REPLAY_BIN) \
  $(B)/release/bench/proc_launch $(B)/release/tests/thread_exit_check $(B)/release/tests/misuse_check \
  $(B)/release/bench/proc_mixed_queue
	LD_PRELOAD=$(B)/release/libscralloc.so $(B)/release/tests/override_check
	LD_PRELOAD=$(B)/debug/libscralloc.so $(B)/release/tests/override_check
	LD_PRELOAD=$(B)/release/libscralloc.so $(B)/release/tests/thread_exit_check
	LD_PRELOAD=$(B)/debug/libscralloc.so $(B)/release/tests/thread_exit_check
	$(PYTHON) tests/preload/misuse_check.py $(B)/release/tests/misuse_check $(B)/release/libscralloc.so
	$(PYTHON) tests/preload/misuse_check.py $(B)/release/tests/misuse_check $(B)/debug/libscralloc.so
	tests/preload/run.sh $(B)/release/libscralloc.so
	SCR_PRELOAD_QUICK=1 tests/preload/run.sh $(B)/debug/libscralloc.so
	tests/preload/replay_check.sh $(B)/debug/libscralloc.so $(B)/release/bench
	$(PYTHON) tests/preload/launch_check.py $(B)/release/bench $(B)/release/libscralloc.so
	$(PYTHON) tests/preload/bench_stats_check.py $(B)/release/bench $(B)/release/libscralloc.so
	tests/preload/remap_race_check.sh $(B)/release/libscralloc.so $(B)/release/bench

# Workloads linked against nothing but libc: each allocator is LD_PRELOADed.
PROC_BENCH_BIN := $(B)/release/bench/proc_xthread $(B)/release/bench/proc_churn $(B)/release/bench/proc_pairs \
  $(B)/release/bench/proc_launch
$(B)/release/bench/proc_%: bench/proc_%.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O2 -Wall -Wextra $(WERROR) -pthread -o $@ $< -lm

bench-process: $(PROC_BENCH_BIN) $(B)/release/libscralloc.so
	$(PYTHON) bench/proc_bench.py --lib $(B)/release/libscralloc.so --bin $(B)/release/bench

bench-replay: $(REPLAY_BIN) $(B)/release/libscralloc.so
	$(PYTHON) bench/replay_bench.py --lib $(B)/release/libscralloc.so --bin $(B)/release/bench

# The malloc/free fast paths alone: ns per pair for six size mixes.
bench-pairs: $(B)/release/bench/proc_pairs $(B)/release/libscralloc.so
	$(PYTHON) bench/pairs_bench.py --lib $(B)/release/libscralloc.so --bin $(B)/release/bench
