-- luarocks --lua-version 5.4 make             (from a checkout: builds and installs the module)
-- luarocks --lua-version 5.4 make --tree DIR  (into DIR; then LUA_CPATH=DIR/lib/lua/5.4/?.so)
rockspec_format = "3.0"
package = "scralloc"
version = "0.1.0-1"
source = {
   url = "git+https://github.com/scralloc/scralloc.git",
   tag = "v0.1.0",
}
description = {
   summary = "Allocator objects that show and control how memory goes back to the OS",
   detailed = [[
scralloc is a memory allocator written in C.  This module gives Lua 5.4
allocator objects (scralloc.new{retain = 1}) with malloc, calloc,
aligned_alloc, realloc, free, read/write, trim and exact statistics, and
runs Lua code in a fresh Lua state whose every allocation comes from a
scralloc heap.  Bad addresses are Lua errors, never crashes.
]],
   license = "MIT",
   labels = { "allocator", "memory", "malloc" },
}
dependencies = {
   "lua >= 5.4, < 5.5",
}
-- bindings/lua/rock.mk builds the module under build/rock and removes it
-- once installed: the checkout keeps no object file.  The module exports
-- luaopen_scralloc only.
build = {
   type = "make",
   makefile = "bindings/lua/rock.mk",
   build_variables = {
      CC = "$(CC)",
      CFLAGS = "$(CFLAGS)",
      LIBFLAG = "$(LIBFLAG)",
      LUA_INCDIR = "$(LUA_INCDIR)",
   },
   install_variables = {
      INST_LIBDIR = "$(LIBDIR)",
   },
}
