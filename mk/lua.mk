# Lua binding (issue 4): the module, scralua, the tests and the fuzzer.
#
#   make lua           the checked builds (SCR_DEBUG=3, -O1 -g):
#                        build/debug/lua/scralloc.so  (require "scralloc" via LUA_CPATH)
#                        build/debug/lua/scralua      (lua with its state on a scralloc heap)
#   make lua-release   the same in build/release/lua/
#   make test-lua      the adapter's C test, the test file and a bounded fuzz
#                      under lua5.4 and under scralua, then again in the
#                      ASan+UBSan builds; scralua beside lua5.4 on the same
#                      command lines and interactive runs on a terminal
#                      (tests/lua/test_scralua_cli.py); the rock built by
#                      luarocks make from a copy (tests/lua/test_rock.sh)
#   make fuzz-lua      a longer fuzz: make fuzz-lua FUZZ_STEPS=200000 FUZZ_SEED=7
#   make bench-lua     tests/lua/bench.lua under lua5.4 with glibc (and jemalloc,
#                      mimalloc, tcmalloc where installed) and under release scralua
#
# The module and scralua link the flavour's libscralloc.a (the unity build
# of core/src/static.c, without SCR_OVERRIDE).  The module exports
# luaopen_scralloc only (bindings/lua/scralloc.map).

LUA        ?= lua5.4
LUA_INC    ?= -I/usr/include/lua5.4
LUA_LIB    ?= -llua5.4
LUA_SRC    := bindings/lua/lscralloc.c bindings/lua/scrlalloc.c
LUA_DEPS   := $(LUA_SRC) bindings/lua/scrlua.h
# scralua's interactive mode uses GNU readline (line editing, history)
# when its headers are installed (libreadline-dev), as Debian's lua5.4
# does; `make SCRALUA_READLINE=` builds without it.
SCRALUA_READLINE ?= $(if $(wildcard /usr/include/readline/readline.h),1)
SCRALUA_RL_CFLAGS := $(if $(SCRALUA_READLINE),-DSCRALUA_READLINE)
SCRALUA_RL_LIBS   := $(if $(SCRALUA_READLINE),-lreadline)
FUZZ_STEPS ?= 10000
FUZZ_SEED  ?= $(shell date +%s)

.PHONY: lua lua-release test-lua fuzz-lua bench-lua
TEST_STEPS  += test-lua
BENCH_STEPS += bench-lua

define luaflavour
$(B)/$(1)/lua/scralloc.so: $(LUA_DEPS) $(B)/$(1)/libscralloc.a bindings/lua/scralloc.map
	@mkdir -p $$(dir $$@)
	$$(CC) $(2) $(WERROR) $(LUA_INC) -shared -Wl,--version-script=bindings/lua/scralloc.map \
	  -o $$@ $(LUA_SRC) $(B)/$(1)/libscralloc.a -ldl
$(B)/$(1)/lua/test_adapter: tests/lua/test_adapter.c $(LUA_DEPS) $(B)/$(1)/libscralloc.a
	@mkdir -p $$(dir $$@)
	$$(CC) $(2) $(WERROR) $(LUA_INC) -Ibindings/lua -o $$@ $$< bindings/lua/scrlalloc.c \
	  $(B)/$(1)/libscralloc.a $(LUA_LIB) -lm -ldl
$(B)/$(1)/lua/scralua: bindings/lua/scralua.c $(LUA_DEPS) $(B)/$(1)/libscralloc.a
	@mkdir -p $$(dir $$@)
	$$(CC) $(2) $(WERROR) $(LUA_INC) $(SCRALUA_RL_CFLAGS) -o $$@ bindings/lua/scralua.c $(LUA_SRC) \
	  $(B)/$(1)/libscralloc.a $(LUA_LIB) $(SCRALUA_RL_LIBS) -lm -ldl
endef
$(eval $(call luaflavour,debug,$(DBG_FLAGS)))
$(eval $(call luaflavour,release,$(REL_FLAGS)))
$(eval $(call luaflavour,asan,$(ASAN_FLAGS)))

LUA_DBG  := $(B)/debug/lua
LUA_ASAN := $(B)/asan/lua
LUA_ENV   = LUA_CPATH='$(LUA_DBG)/?.so;;' LUA=$(LUA)

lua: $(LUA_DBG)/scralloc.so $(LUA_DBG)/scralua
lua-release: $(B)/release/lua/scralloc.so $(B)/release/lua/scralua

test-lua: lua $(LUA_ASAN)/scralua $(LUA_DBG)/test_adapter $(LUA_ASAN)/test_adapter
	@echo "== lua: the lua_Alloc adapter in C (debug, then ASan+UBSan)"
	$(LUA_DBG)/test_adapter
	ASAN_OPTIONS=detect_leaks=1 $(LUA_ASAN)/test_adapter
	@echo "== lua: tests (lua5.4 + debug module)"
	$(LUA_ENV) SCRALUA=$(abspath $(LUA_DBG)/scralua) $(LUA) tests/lua/test_scralloc.lua
	@echo "== lua: the module exports luaopen_scralloc only"
	@syms=$$(nm -D --defined-only $(LUA_DBG)/scralloc.so | awk '{print $$3}' | tr '\n' ' '); \
	  [ "$$syms" = "luaopen_scralloc " ] || { echo "FAIL: exported: $$syms"; exit 1; }
	@echo "== lua: the LuaRocks package, built from a copy of the checkout"
	tests/lua/test_rock.sh $(LUA)
	@echo "== lua: scralua beside lua5.4: the same command lines, inputs and interactive runs on a terminal"
	$(PYTHON) tests/lua/test_scralua_cli.py $(LUA_DBG)/scralua $(LUA)
	@echo "== lua: the environment's warnings in scralua and scralloc.new{env = true}"
	$(PYTHON) tests/lua/test_env_warnings.py $(LUA_DBG)/scralua $(LUA_DBG) $(LUA)
	@echo "== lua: fuzz (lua5.4 + debug module)"
	$(LUA_ENV) $(LUA) tests/lua/fuzz.lua $(FUZZ_STEPS) 1
	@echo "== lua: fuzz inside scralua (debug)"
	$(LUA_ENV) $(LUA_DBG)/scralua tests/lua/fuzz.lua $(FUZZ_STEPS) 2
	@echo "== lua: tests and fuzz inside scralua (ASan+UBSan)"
	$(LUA_ENV) ASAN_OPTIONS=detect_leaks=1 SCRALUA=$(abspath $(LUA_ASAN)/scralua) \
	  $(LUA_ASAN)/scralua tests/lua/test_scralloc.lua
	$(LUA_ENV) ASAN_OPTIONS=detect_leaks=1 $(LUA_ASAN)/scralua tests/lua/fuzz.lua $(FUZZ_STEPS) 3
	ASAN_OPTIONS=detect_leaks=1 $(PYTHON) tests/lua/test_scralua_cli.py $(LUA_ASAN)/scralua $(LUA)

fuzz-lua: lua
	$(LUA_ENV) $(LUA) tests/lua/fuzz.lua $(FUZZ_STEPS) $(FUZZ_SEED)

LUA_BENCH_SCALE ?= 1
LUA_PRELOADS := $(wildcard /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 \
  /usr/lib/x86_64-linux-gnu/libmimalloc.so.2 /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4)
LUA_TIME := $(if $(wildcard /usr/bin/time),/usr/bin/time -f '          wall %es  max RSS %MKB')

bench-lua: lua-release
	@echo "== lua: tests/lua/bench.lua $(LUA_BENCH_SCALE) (CPU seconds per workload)"
	@$(LUA_TIME) $(LUA) tests/lua/bench.lua $(LUA_BENCH_SCALE)
	@for so in $(LUA_PRELOADS); do LD_PRELOAD=$$so $(LUA_TIME) $(LUA) tests/lua/bench.lua $(LUA_BENCH_SCALE); done
	@$(LUA_TIME) $(B)/release/lua/scralua -S tests/lua/bench.lua $(LUA_BENCH_SCALE) 2>&1 | grep -v 'classes in use'
