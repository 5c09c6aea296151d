# scralloc build.  `make` builds the release and debug libraries;
# `make test` runs every test lane; `make bench` runs the benchmarks.
# Parts of the project add their own targets in mk/*.mk (python, lua,
# process allocator) and hook them into TEST_STEPS / BENCH_STEPS.

CC      ?= cc
PYTHON  ?= python3
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter
CSTD    := -std=gnu11
INC     := -Icore/include -Icore/src
BASE    := $(CSTD) $(WARN) $(INC) -fPIC -fvisibility=hidden -pthread

# Intel's JCC erratum (Skylake-derived cores, this project's VM among
# them): a jump that crosses or ends on a 32-byte boundary is not kept in
# the decoded-instruction cache, so a hit path runs slower or faster as
# unrelated code moves it by a few bytes.  The assembler pads such jumps
# off those boundaries (with prefixes first: the hit paths keep their
# instruction counts).  docs/process.md has the measurements.
JCC_PAD := $(shell $(CC) -Wa,-mbranches-within-32B-boundaries -x c -c /dev/null -o /dev/null 2>/dev/null && \
             echo -Wa,-mbranches-within-32B-boundaries)
REL_FLAGS   := $(BASE) -O2 -DNDEBUG -DSCR_DEBUG=0 $(JCC_PAD)
DBG_FLAGS   := $(BASE) -O1 -g -DSCR_DEBUG=3
ASAN_FLAGS  := $(BASE) -O1 -g -DSCR_DEBUG=2 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
TSAN_FLAGS  := $(BASE) -O1 -g -DSCR_DEBUG=1 -fsanitize=thread
WERROR      ?= -Werror
# Shared libraries carry libgcc's unwinder (the profile's stacks) inside,
# hidden, rather than needing libgcc_s.so.1: a library preloaded into
# every program should not load, relocate and keep resident another one.
SO_LDFLAGS  := -static-libgcc -Wl,--exclude-libs,ALL

CORE_SRC := $(shell find core/src -name '*.c')
CORE_HDR := $(shell find core -name '*.h')

B := build
LIBS := $(B)/release/libscralloc.a $(B)/release/libscralloc.so \
        $(B)/debug/libscralloc.a $(B)/debug/libscralloc.so

.PHONY: all lib test test-c bench bench-core clean
all: lib
lib: $(LIBS)

# One unity compile per flavour (core/src/static.c includes every source).
# The static archive holds the scr_* API only; the shared library also
# defines malloc & co. (SCR_OVERRIDE) so that LD_PRELOAD replaces malloc.
define flavour
$(B)/$(1)/static.o: $(CORE_SRC) $(CORE_HDR) | $(B)/$(1)
	$$(CC) $(2) $(WERROR) -c core/src/static.c -o $$@
$(B)/$(1)/override.o: $(CORE_SRC) $(CORE_HDR) | $(B)/$(1)
	$$(CC) $(2) $(WERROR) -DSCR_OVERRIDE=1 -c core/src/static.c -o $$@
$(B)/$(1)/libscralloc.a: $(B)/$(1)/static.o
	rm -f $$@ && ar rcs $$@ $$^
$(B)/$(1)/libscralloc.so: $(B)/$(1)/override.o
	$$(CC) $(2) -shared $(SO_LDFLAGS) -o $$@ $$^ -ldl
$(B)/$(1):
	mkdir -p $$@
endef
$(eval $(call flavour,release,$(REL_FLAGS)))
$(eval $(call flavour,debug,$(DBG_FLAGS)))
$(eval $(call flavour,asan,$(ASAN_FLAGS)))
$(eval $(call flavour,tsan,$(TSAN_FLAGS)))

# ---- C tests: every tests/c/test_*.c, in the debug and ASan+UBSan builds.
C_TESTS := $(patsubst tests/c/%.c,%,$(wildcard tests/c/test_*.c))
TEST_STEPS  := test-c
BENCH_STEPS := bench-core

define ctest
$(B)/$(1)/tests/$(2): tests/c/$(2).c $(wildcard tests/c/*.h) $(B)/$(1)/libscralloc.a
	@mkdir -p $$(dir $$@)
	$$(CC) $(3) $(WERROR) -Itests/c -o $$@ $$< $(B)/$(1)/libscralloc.a -ldl
endef
$(foreach t,$(C_TESTS),$(eval $(call ctest,debug,$(t),$(DBG_FLAGS))))
$(foreach t,$(C_TESTS),$(eval $(call ctest,asan,$(t),$(ASAN_FLAGS))))
# tests/c/test_threads_*.c also run under ThreadSanitizer
TSAN_C_TESTS := $(patsubst tests/c/%.c,%,$(wildcard tests/c/test_threads_*.c))
$(foreach t,$(TSAN_C_TESTS),$(eval $(call ctest,tsan,$(t),$(TSAN_FLAGS))))

test-c: $(foreach t,$(C_TESTS),$(B)/debug/tests/$(t) $(B)/asan/tests/$(t)) \
        $(foreach t,$(TSAN_C_TESTS),$(B)/tsan/tests/$(t))
	@set -e; for t in $(C_TESTS); do \
	  echo "== debug $$t"; $(B)/debug/tests/$$t; \
	  echo "== asan+ubsan $$t"; ASAN_OPTIONS=detect_leaks=1 $(B)/asan/tests/$$t; \
	done; for t in $(TSAN_C_TESTS); do \
	  echo "== tsan $$t"; TSAN_OPTIONS="halt_on_error=1 exitcode=66" $(B)/tsan/tests/$$t; \
	done

$(B)/release/bench/bench_pairs: bench/bench_pairs.c $(B)/release/libscralloc.a
	@mkdir -p $(dir $@)
	$(CC) $(REL_FLAGS) -o $@ $< $(B)/release/libscralloc.a -ldl
bench-core: $(B)/release/bench/bench_pairs
	$(B)/release/bench/bench_pairs

-include mk/*.mk

# The main demonstration: the seed's reproducer in C beside glibc, jemalloc,
# mimalloc and tcmalloc; the same from Python and from Lua; and a real
# program (python3) running on scralloc through LD_PRELOAD.
.PHONY: demo
demo: lib $(B)/release/bench/bench_pairs lua-release python-release
	@echo "== C: 200,000 alloc/free pairs (bench/bench_pairs.c, release build)"
	$(B)/release/bench/bench_pairs 200000 3
	@echo "== Python: the same at the prompt (examples/seed_table.py)"
	PYTHONPATH=bindings/python $(PYTHON) examples/seed_table.py
	@echo "== Lua: scralua runs a script on a scralloc heap (examples/demo.lua)"
	SCRALLOC_STATS=1 $(B)/release/lua/scralua examples/demo.lua
	@echo "== any program: python3 with LD_PRELOAD=libscralloc.so"
	py=$$($(PYTHON) -c 'import sys; print(sys.executable)'); \
	  LD_PRELOAD=$(abspath $(B)/release/libscralloc.so) SCRALLOC_STATS=1 \
	  $$py -c 'd = {i: str(i) * 3 for i in range(300000)}; print(len(d), "entries")'

test: $(TEST_STEPS)
bench: $(BENCH_STEPS)

clean:
	rm -rf $(B) *.egg-info bindings/python/scralloc/*.so
