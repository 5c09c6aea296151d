# The build of the LuaRocks package (scralloc-0.1.0-1.rockspec, build type
# "make"): `luarocks make` runs `make -f bindings/lua/rock.mk` and then
# `make -f bindings/lua/rock.mk install INST_LIBDIR=...`.
#
# The objects go to ROCK_BUILD (a folder under build/, which git ignores)
# and `install` removes it after copying the module, so a checkout is left
# as it was.  The module exports luaopen_scralloc only (scralloc.map).

CC         ?= cc
CFLAGS     ?= -O2 -fPIC
LIBFLAG    ?= -shared
LUA_INCDIR ?= /usr/include/lua5.4
INST_LIBDIR ?= $(error INST_LIBDIR: the directory the module is installed in)
ROCK_BUILD ?= build/rock

ROCK_CFLAGS := $(CFLAGS) -fPIC -std=gnu11 -fvisibility=hidden -pthread -DNDEBUG -DSCR_DEBUG=0 \
               -I$(LUA_INCDIR) -Icore/include -Icore/src -Ibindings/lua
ROCK_SRC := bindings/lua/lscralloc.c bindings/lua/scrlalloc.c core/src/static.c

.PHONY: all install
all: $(ROCK_BUILD)/scralloc.so

# one compiler call: no object file is written anywhere
$(ROCK_BUILD)/scralloc.so: $(ROCK_SRC) bindings/lua/scralloc.map
	mkdir -p $(ROCK_BUILD)
	$(CC) $(ROCK_CFLAGS) $(LIBFLAG) -Wl,--version-script=bindings/lua/scralloc.map \
	  -o $@ $(ROCK_SRC) -pthread -ldl

install: $(ROCK_BUILD)/scralloc.so
	mkdir -p '$(INST_LIBDIR)'
	cp $(ROCK_BUILD)/scralloc.so '$(INST_LIBDIR)/scralloc.so'
	rm -rf $(ROCK_BUILD)
	rmdir build 2>/dev/null || true
