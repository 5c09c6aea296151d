-- Tests of the Lua module scralloc, its lua_Alloc adapter (run) and scralua.
--
--   LUA_CPATH='build/debug/lua/?.so;;' SCRALUA=build/debug/lua/scralua \
--     lua5.4 tests/lua/test_scralloc.lua
--
-- Runs under lua5.4 (module from LUA_CPATH) or under scralua (module
-- preloaded).  SCRALUA names the interpreter to test (skipped when unset);
-- LUA names the reference interpreter its output is compared with.

local scralloc = require "scralloc"

local LUA = os.getenv("LUA") or "lua5.4"
local SCRALUA = os.getenv("SCRALUA")
if SCRALUA and SCRALUA:sub(1, 1) ~= "/" and SCRALUA:find("/", 1, true) then
  SCRALUA = assert(os.getenv("PWD"), "PWD") .. "/" .. SCRALUA -- the tests change directory
end
local IN_SCRALUA = scralloc.heap_stats() ~= nil

local passed, failed = 0, 0
local function test(name, fn)
  local ok, err = xpcall(fn, debug.traceback)
  if ok then
    passed = passed + 1
    print("ok    " .. name)
  else
    failed = failed + 1
    print("FAIL  " .. name .. "\n" .. tostring(err))
  end
end

local function eq(got, want, what)
  if got ~= want then
    error(string.format("%s: expected %s, got %s", what or "value", tostring(want), tostring(got)), 2)
  end
end

-- f(...) must fail with a message containing every pattern (plain text).
local function raises(f, ...)
  local pats = { ... }
  return function(...)
    local ok, err = pcall(f, ...)
    if ok then error("expected an error containing '" .. table.concat(pats, "', '") .. "'", 2) end
    err = tostring(err)
    for _, p in ipairs(pats) do
      if not err:find(p, 1, true) then
        error("error '" .. err .. "' lacks '" .. p .. "'", 2)
      end
    end
    return err
  end
end

local STATS_FIELDS = {
  "allocs", "mmaps", "bytes", "mmap_calls", "munmap_calls", "madvise_calls",
  "mremap_calls", "os_failures", "heap_total", "heap_used", "retained_pages",
  "retained_bytes", "cached_blocks", "cached_bytes", "dirty_bytes", "large_allocs", "large_bytes",
  "reserved_bytes", "meta_bytes", "decommits", "page_acquires", "page_releases",
  "dontneed_bytes", "lazy_free_bytes", "purge_passes",
}
local CLASS_FIELDS = { "block_size", "live", "pages", "retained" }
local OPTIONS = { "retain", "retain_bytes", "large_cache", "large_cache_bytes",
  "huge_threshold", "madv_free_below", "limit_bytes", "purge_delay_ms", "decommit_batch", "profile_rate" }

-- Every block freed and the heap trimmed: nothing is left.
local function assert_empty(a, what)
  a:trim()
  local st = a:stats()
  eq(st.allocs, 0, (what or "") .. " allocs")
  eq(st.mmaps, 0, (what or "") .. " mmaps")
  eq(st.bytes, 0, (what or "") .. " bytes")
  eq(a:usage().live_bytes, 0, (what or "") .. " binding live bytes")
end

---------------------------------------------------------------------------
-- the module

test("module surface", function()
  eq(type(scralloc.version), "string", "version")
  assert(scralloc.version:match("^%d+%.%d+%.%d+$"))
  eq(scralloc.page_size, 64 * 1024, "page_size")
  eq(scralloc.small_max, 64 * 1024, "small_max")
  eq(scralloc.min_align, 16, "min_align")
  assert(scralloc.segment_size >= scralloc.page_size)
  eq(#scralloc.option_info, #OPTIONS, "option count")
  for i, name in ipairs(OPTIONS) do
    local o = scralloc.option_info[i]
    eq(o.name, name, "option name")
    assert(type(o.doc) == "string" and #o.doc > 0)
    assert(o.min <= o.default and o.default <= o.max, name)
  end
  local msg, code = scralloc.strerror(6)
  eq(code, "SCR_EDOUBLEFREE", "strerror code")
  assert(type(msg) == "string" and #msg > 0)
end)

test("size classes", function()
  local prev = 0
  for i = 1, scralloc.class_count do
    local sz = scralloc.class_size(i)
    assert(sz > prev, "class sizes grow")
    eq(scralloc.size_class(sz), i, "size_class(class_size(i))")
    eq(scralloc.size_class(prev + 1), i, "size_class(prev + 1)")
    prev = sz
  end
  eq(prev, scralloc.small_max, "last class")
  eq(scralloc.class_size(0), nil, "class 0")
  eq(scralloc.class_size(scralloc.class_count + 1), nil, "class past the end")
  eq(scralloc.size_class(scralloc.small_max + 1), nil, "large")
  eq(scralloc.size_class(-1), nil, "negative")
end)

test("new: options", function()
  local a <close> = scralloc.new()
  local o = a:options()
  for _, info in ipairs(scralloc.option_info) do
    eq(o[info.name], info.default, "default " .. info.name)
  end
  local b <close> = scralloc.new { retain = 0, large_cache = 2, retain_bytes = "4M" }
  o = b:options()
  eq(o.retain, 0, "retain")
  eq(o.large_cache, 2, "large_cache")
  eq(o.retain_bytes, 4 << 20, "retain_bytes from text")
  local c <close> = scralloc.new { env = true }
  assert(c:options().retain >= 0)
  -- a heap's options make a heap with the same ones: retain_bytes'
  -- default, no cap (SIZE_MAX), reads as math.maxinteger
  eq(a:options().retain_bytes, math.maxinteger, "retain_bytes: no cap")
  local d <close> = scralloc.new(a:options())
  for _, name in ipairs(OPTIONS) do eq(d:options()[name], a:options()[name], "round trip " .. name) end
  raises(scralloc.new, "unknown option 'nosuch'")({ nosuch = 1 })
  raises(scralloc.new, "out of range")({ retain = -1 })
  raises(scralloc.new, "out of range")({ retain = (1 << 20) + 1 })
  raises(scralloc.new, "must be an integer or a string")({ retain = true })
  raises(scralloc.new, "bad value")({ retain = "lots" })
  raises(scralloc.new, "option names must be strings")({ 1 })
  raises(scralloc.new, "table expected")(42)
end)

---------------------------------------------------------------------------
-- blocks

test("malloc, usable_size, write, read, free", function()
  local a <close> = scralloc.new { retain = 1 }
  local blocks = {}
  for _, n in ipairs { 0, 1, 15, 16, 17, 100, 1000, 16384, 16385, 100000, 1 << 20, 3 << 20 } do
    local p = a:malloc(n)
    assert(math.type(p) == "integer" and p ~= 0)
    eq(p % 16, 0, "alignment of malloc(" .. n .. ")")
    local us = a:usable_size(p)
    assert(us >= n and us >= 1, "usable size")
    local s = string.rep(string.char(n % 251), us)
    a:write(p, s)
    eq(a:read(p, us), s, "read back " .. n)
    a:write(p, "xyz", us - 3)
    eq(a:read(p, 3, us - 3), "xyz", "read at the end")
    eq(a:read(p, 0, us), "", "empty read at the end")
    blocks[#blocks + 1] = { p, s:sub(1, us - 3) .. "xyz" }
  end
  eq(a.allocs, #blocks, "allocs")
  eq(a:stats().heap_used, a:usage().live_bytes, "heap_used == binding live bytes")
  for _, b in ipairs(blocks) do
    eq(a:read(b[1], #b[2]), b[2], "contents survive other blocks")
  end
  for _, b in ipairs(blocks) do a:free(b[1]) end
  a:free(0) -- NULL
  assert_empty(a)
end)

test("write and read bounds", function()
  local a <close> = scralloc.new()
  local p = a:malloc(40)
  local us = a:usable_size(p)
  raises(a.write, "outside the block's usable size", "SCR_EINVAL")(a, p, string.rep("x", us + 1))
  raises(a.write, "outside")(a, p, "ab", us - 1)
  raises(a.write, "outside")(a, p, "a", -1)
  raises(a.read, "outside")(a, p, us + 1)
  raises(a.read, "outside")(a, p, 1, us)
  raises(a.read, "SCR_EINVAL")(a, p, -1)
  raises(a.read, "SCR_EINTERIOR")(a, p + 16, 1)
  raises(a.write, "SCR_EFOREIGN")(a, 4096, "x")
  raises(a.write, "string expected")(a, p, {})
  a:free(p)
  -- reading or writing a freed block is a use after free, not a double free
  local at = string.format("(0x%x): ", p)
  raises(a.read, "read" .. at .. "use of a freed block", "SCR_EDOUBLEFREE")(a, p, 1)
  raises(a.write, "write" .. at .. "use of a freed block")(a, p, "x")
  raises(a.usable_size, "usable_size" .. at .. "use of a freed block")(a, p)
  raises(a.free, "free" .. at .. "double free")(a, p)
  assert_empty(a)
end)

test("calloc zeroes, even reused memory", function()
  local a <close> = scralloc.new { retain = 4 }
  for _, n in ipairs { 1, 64, 5000, 40000, 1 << 21 } do
    local p = a:malloc(n)
    a:write(p, string.rep("\255", a:usable_size(p)))
    a:free(p)
    local q = a:calloc(1, n)
    eq(a:read(q, n), string.rep("\0", n), "calloc(1, " .. n .. ")")
    a:free(q)
  end
  local q = a:calloc(10, 100)
  eq(a:read(q, 1000), string.rep("\0", 1000), "calloc(10, 100)")
  a:free(q)
  q = a:calloc(0, 5)
  a:free(q)
  raises(a.calloc, "SCR_ENOMEM")(a, 1 << 40, 1 << 40)
  raises(a.calloc, "SCR_EINVAL")(a, -1, 8)
  raises(a.calloc, "SCR_EINVAL")(a, 8, -1)
  assert_empty(a)
end)

test("aligned_alloc", function()
  local a <close> = scralloc.new()
  local ps = {}
  for k = 0, 20 do
    local al = 1 << k
    for _, n in ipairs { 0, 1, al, 3 * al + 5 } do
      local p = a:aligned_alloc(al, n)
      eq(p % al, 0, "aligned_alloc(" .. al .. ", " .. n .. ")")
      assert(a:usable_size(p) >= n)
      a:write(p, "end", n >= 3 and n - 3 or 0)
      ps[#ps + 1] = p
    end
  end
  for _, p in ipairs(ps) do a:free(p) end
  for _, al in ipairs { 0, 3, 24, -16 } do
    raises(a.aligned_alloc, "SCR_EINVAL")(a, al, 16)
  end
  raises(a.aligned_alloc, "SCR_EINVAL")(a, 16, -1)
  eq(a.allocs, 0, "nothing allocated by the failures")
  assert_empty(a)
end)

test("realloc", function()
  local a <close> = scralloc.new()
  local p = a:realloc(0, 10) -- malloc
  a:write(p, "0123456789")
  for _, n in ipairs { 20, 200, 5000, 20000, 1 << 20, 64, 11, 10 } do
    local q = a:realloc(p, n)
    eq(a:read(q, 10), "0123456789", "contents kept at " .. n)
    assert(a:usable_size(q) >= n)
    p = q
  end
  local q = a:realloc(p, 4)
  eq(a:read(q, 4), "0123", "shrink keeps the prefix")
  eq(a:realloc(q, 0), nil, "realloc(p, 0) frees")
  raises(a.usable_size, "SCR_E")(a, q)
  raises(a.realloc, "SCR_EDOUBLEFREE")(a, q, 10)
  raises(a.realloc, "SCR_EFOREIGN")(a, 64, 10)
  local r = a:malloc(100)
  raises(a.realloc, "SCR_EINTERIOR")(a, r + 32, 10)
  raises(a.realloc, "SCR_EINVAL")(a, r, -5)
  raises(a.realloc, "SCR_ENOMEM")(a, r, 1 << 62)
  eq(a:usable_size(r) >= 100, true, "block untouched by a failed realloc")
  a:free(r)
  assert_empty(a)
end)

test("bad addresses: errors, and the heap stays usable", function()
  local a <close> = scralloc.new()
  local other <close> = scralloc.new()
  local p = a:malloc(64)
  local big = a:malloc(200000)
  local theirs = other:malloc(64)
  local before = a:stats()
  local cases = {
    { 12345, "SCR_EFOREIGN" },
    { -8, "SCR_EFOREIGN" },
    { theirs, "SCR_EFOREIGN" },
    { p + 1, "SCR_EINTERIOR" },
    { p + 16, "SCR_EINTERIOR" },
    { big + 4096, "SCR_EINTERIOR" },
    { p + a:usable_size(p), "SCR_ENOTALLOC" }, -- the next slot, never handed out
  }
  for _, c in ipairs(cases) do
    local err = raises(a.free, c[2])(a, c[1])
    assert(err:find("free(0x", 1, true), err)
    raises(a.usable_size, c[2])(a, c[1])
    local ok, msg, code = a:check(c[1])
    eq(ok, false, "check")
    eq(code, c[2], "check code")
    assert(type(msg) == "string")
  end
  eq(a:check(p), true, "check of a live block")
  a:free(p)
  raises(a.free, "SCR_EDOUBLEFREE")(a, p)
  local _, _, code = a:check(p)
  eq(code, "SCR_EDOUBLEFREE", "check after free")
  local after = a:stats()
  eq(after.allocs, before.allocs - 1, "only the good free counted")
  eq(a:validate(), true, "validate")
  local q = a:malloc(64) -- still works
  a:write(q, "fine")
  eq(a:read(q, 4), "fine", "usable after errors")
  a:free(q)
  a:free(big)
  other:free(theirs)
  raises(a.malloc, "SCR_ENOMEM")(a, 1 << 62)
  raises(a.malloc, "SCR_ENOMEM")(a, math.maxinteger)
  raises(a.malloc, "SCR_EINVAL")(a, -1)
  raises(a.malloc, "number has no integer representation")(a, 1.5)
  raises(a.malloc, "number expected")(a, "many")
  raises(a.free, "number expected")(a, nil)
  raises(a.malloc, "scralloc.allocator expected")({}, 8)
  assert_empty(a)
  assert_empty(other)
end)

---------------------------------------------------------------------------
-- figures

test("stats, stats_json, fields, trim", function()
  local a <close> = scralloc.new { retain = 2 }
  local st = a:stats()
  for _, f in ipairs(STATS_FIELDS) do
    eq(math.type(st[f]), "integer", "stats field " .. f)
  end
  eq(#st.classes, scralloc.class_count, "classes")
  for i, c in ipairs(st.classes) do
    for _, f in ipairs(CLASS_FIELDS) do eq(math.type(c[f]), "integer", "class field " .. f) end
    eq(c.block_size, scralloc.class_size(i), "class block size")
  end
  local ps = {}
  for i = 1, 300 do ps[i] = a:malloc(48) end
  local big = a:malloc(2 << 20)
  st = a:stats()
  eq(st.allocs, 301, "allocs")
  eq(a.allocs, 301, "allocs field")
  eq(a.mmaps, st.mmaps, "mmaps field")
  eq(a.bytes, st.bytes, "bytes field")
  assert(st.bytes > 0 and st.mmaps > 0)
  eq(st.classes[scralloc.size_class(48)].live, 300, "class live")
  eq(st.large_allocs, 1, "large_allocs")
  eq(st.heap_used, a:usage().live_bytes, "heap_used")
  local js = a:stats_json()
  assert(js:match("^{.*}$"), "json object")
  assert(js:find('"allocs":301', 1, true), "json allocs")
  for _, f in ipairs(STATS_FIELDS) do assert(js:find('"' .. f .. '":', 1, true), "json " .. f) end
  for _, p in ipairs(ps) do a:free(p) end
  a:free(big)
  eq(a.allocs, 0, "all freed")
  local given = a:trim()
  assert(math.type(given) == "integer" and given >= 0)
  eq(a.mmaps, 0, "mmaps after trim")
  eq(a.bytes, 0, "bytes after trim")
  eq(a:trim(), 0, "second trim gives nothing")
  local s = tostring(a)
  assert(s:find("scralloc.allocator", 1, true) and s:find("allocs=0", 1, true), s)
end)

test("close, <close>, __gc, use after close", function()
  local a = scralloc.new()
  local p = a:malloc(100)
  eq(a.closed, false, "open")
  a:close()
  eq(a.closed, true, "closed")
  a:close() -- idempotent
  assert(tostring(a):find("closed", 1, true))
  for _, m in ipairs { "malloc", "calloc", "aligned_alloc", "realloc", "free", "usable_size",
    "write", "read", "trim", "stats", "stats_json", "options", "validate", "limit",
    "usage", "run", "check" } do
    raises(a[m], "closed")(a, 16, 16)
  end
  raises(function() return a.allocs end, "closed")()
  local escaped
  do
    local b <close> = scralloc.new { retain = 1 }
    escaped = b
    b:malloc(10) -- a live block: closing gives it back too
  end
  eq(escaped.closed, true, "<close> closed it")
  local mt = getmetatable(escaped)
  eq(mt.__gc, mt.__close, "__gc and __close share the finalizer")
  for _ = 1, 20 do
    local c = scralloc.new()
    c:malloc(1000)
    c:malloc(1 << 20)
  end
  collectgarbage()
  collectgarbage()
  raises(function() local c <close> = scralloc.new(); error("inside") end, "inside")()
end)

test("limit: fail after n allocations, or above a byte limit", function()
  local a <close> = scralloc.new()
  local u = a:limit { count = 2 }
  eq(u.limit_count, 2, "limit_count")
  local p1 = a:malloc(10)
  local p2 = a:calloc(1, 10)
  raises(a.malloc, "SCR_ENOMEM", "limit")(a, 10)
  raises(a.aligned_alloc, "SCR_ENOMEM")(a, 64, 10)
  raises(a.realloc, "SCR_ENOMEM")(a, p1, 100000) -- growth is an allocation
  eq(a:usable_size(p1) < 100000, true, "block untouched")
  local p3 = a:realloc(p2, 1) -- a shrink is never refused
  a:free(p1)
  a:free(p3)
  eq(a:usage().failures, 3, "failures counted")
  a:limit()
  eq(a:usage().limit_count, nil, "lifted")
  a:free(a:malloc(10))
  a:limit { bytes = 4096 }
  local q = a:malloc(3000)
  raises(a.malloc, "SCR_ENOMEM")(a, 2000)
  a:free(q)
  q = a:malloc(4000)
  a:free(q)
  a:limit { count = 0 }
  raises(a.malloc, "SCR_ENOMEM")(a, 1)
  a:limit(nil)
  raises(a.limit, "unknown key 'counts'")(a, { counts = 1 })
  raises(a.limit, "non-negative integer")(a, { count = -1 })
  assert_empty(a)
end)

-- Whole-number floats (2^20, 64 * 2^20, 1e6) are integers wherever an
-- integer is wanted: what math.tointeger accepts, and nothing else.
test("whole-number floats are integers everywhere", function()
  local a <close> = scralloc.new { limit_bytes = 64 * 2^20, retain = 2.0, retain_bytes = "4M" }
  eq(math.type(a:options().limit_bytes), "integer", "limit_bytes is an integer")
  eq(a:options().limit_bytes, 64 << 20, "new{limit_bytes = 64 * 2^20}")
  eq(a:options().retain, 2, "new{retain = 2.0}")
  eq(a:limit { bytes = 2^20, count = 1e3 }.limit_bytes, 1 << 20, "limit{bytes = 2^20}")
  eq(a:usage().limit_count, 1000, "limit{count = 1e3}")
  eq(a:limit { bytes = "4096" }.limit_bytes, 4096, "a string math.tointeger reads")
  a:limit()
  local p = a:malloc(2^10)
  assert(a:usable_size(p) >= 1024)
  p = a:realloc(p, 4096.0)
  a:write(p, "abc", 8.0)
  eq(a:read(p, 3.0, 8.0), "abc", "read and write with float sizes and offsets")
  eq(a:usable_size(p + 0.0), a:usable_size(p), "an address as a float")
  a:free(p + 0.0)
  local q = a:calloc(2.0, 8.0)
  local r = a:aligned_alloc(2^12, 1.0)
  eq(r % 4096, 0, "aligned_alloc(2^12, 1.0)")
  a:free(q)
  a:free(r)
  eq(scralloc.size_class(16.0), scralloc.size_class(16), "size_class(16.0)")
  eq(scralloc.class_size(1.0), scralloc.class_size(1), "class_size(1.0)")
  -- and what math.tointeger refuses stays an error
  for _, bad in ipairs { 1.5, 2^63, 0 / 0, math.huge } do
    assert(math.tointeger(bad) == nil)
    raises(scralloc.new, "new: option 'limit_bytes' must be a whole number")({ limit_bytes = bad })
    raises(a.limit, "limit: 'bytes' must be a non-negative integer, not")(a, { bytes = bad })
    raises(a.malloc, "bad argument #2 to 'malloc' (size: number has no integer representation)")(a, bad)
  end
  raises(a.limit, "limit: 'count' must be a non-negative integer, not -1.0")(a, { count = -1.0 })
  raises(scralloc.new, "out of range")({ retain = -1.0 })
  raises(scralloc.size_class, "number has no integer representation")(0.5)
  assert_empty(a)
end)

test("calloc: an overflowing count * size says so and is not a failure", function()
  local a <close> = scralloc.new()
  local p = a:malloc(100) -- live bytes: a limit check on SIZE_MAX would refuse
  for _, c in ipairs { { 1 << 40, 1 << 40 }, { math.maxinteger, 3 }, { 3, math.maxinteger } } do
    local err = raises(a.calloc, "count * size overflows", "SCR_ENOMEM")(a, c[1], c[2])
    assert(not err:find("limit", 1, true), err)
    assert(err:find(("calloc(%d, %d)"):format(c[1], c[2]), 1, true), err)
  end
  eq(a:usage().failures, 0, "no failure counted")
  -- a product that fits but no heap can give: the heap refuses, no limit does
  for _, c in ipairs { { math.maxinteger, 2 }, { 1, math.maxinteger } } do
    local err = raises(a.calloc, "SCR_ENOMEM")(a, c[1], c[2])
    assert(not err:find("limit", 1, true) and not err:find("overflow", 1, true), err)
  end
  assert(not raises(a.malloc, "SCR_ENOMEM")(a, math.maxinteger):find("limit", 1, true))
  eq(a:usage().failures, 3, "the heap's refusals")
  a:limit { bytes = 1 << 20 }
  raises(a.calloc, "count * size overflows")(a, 1 << 40, 1 << 40)
  eq(a:usage().failures, 3, "not a limit failure under a limit either")
  raises(a.calloc, "refused by the allocator's limit")(a, 1 << 20, 2)
  eq(a:usage().failures, 4, "a real refusal is one")
  a:limit()
  a:free(a:calloc(1 << 10, 1 << 10))
  a:free(p)
  assert_empty(a)
end)

test("failures count the heap's refusals too; allocations only what succeeded", function()
  local a <close> = scralloc.new { limit_bytes = "1M" }
  local before = a:usage()
  raises(a.malloc, "malloc(2097152): out of memory (SCR_ENOMEM)")(a, 2 << 20)
  raises(a.realloc, "realloc(0x0, 2097152): out of memory (SCR_ENOMEM)")(a, 0, 2 << 20)
  local p = a:malloc(100)
  raises(a.realloc, "SCR_ENOMEM")(a, p, 2 << 20) -- a growth the heap refuses
  raises(a.malloc, "SCR_ENOMEM")(a, 1 << 62)
  local u = a:usage()
  eq(u.failures - before.failures, 4, "refused by the heap")
  eq(u.allocations - before.allocations, 1, "allocations that got their block")
  a:free(p)
  -- in a state on the heap: every refusal Lua saw is counted
  raises(a.run, "not enough memory")(a, "local t = {} for i = 1, 1e6 do t[i] = i end")
  assert(a:usage().failures > u.failures, "the run's refusals are counted")
  assert_empty(a)
end)

test("messages name the call and the argument", function()
  local a <close> = scralloc.new()
  local p = a:malloc(10)
  local hex = ("0x%x"):format(p)
  raises(a.realloc, "realloc(" .. hex .. ", -1): invalid size or alignment (SCR_EINVAL, size is negative)")(a, p, -1)
  raises(a.calloc, "calloc(-1, 8): ", "count is negative")(a, -1, 8)
  raises(a.calloc, "calloc(8, -1): ", "size is negative")(a, 8, -1)
  raises(a.malloc, "malloc(-1): ", "size is negative")(a, -1)
  raises(a.read, "read(" .. hex .. ", -2): ", "size is negative")(a, p, -2)
  raises(a.aligned_alloc, "aligned_alloc(24, 8): ", "alignment is not a power of two")(a, 24, 8)
  raises(a.aligned_alloc, "bad argument #3 to 'aligned_alloc' (size is missing)")(a, 16)
  raises(a.aligned_alloc, "bad argument #2 to 'aligned_alloc' (alignment is missing)")(a)
  -- a method call does not count self, as Lua's own messages
  raises(function() return a:aligned_alloc(16) end, "bad argument #2 to 'aligned_alloc' (size is missing)")()
  raises(function() return a:free("x") end, "bad argument #1 to 'free' (address: number expected, got string)")()
  raises(function() return a.free(nil, 1) end, "bad argument #1 to 'free' (scralloc.allocator expected, got nil)")()
  raises(function() return a:write(p) end, "bad argument #2 to 'write' (data is missing)")()
  raises(a.free, "bad argument #2 to 'free' (address: number expected, got string)")(a, "x")
  raises(a.free, "bad argument #1 to 'free' (scralloc.allocator expected, got table)")({}, 0)
  raises(a.write, "bad argument #4 to 'write' (offset: number has no integer representation)")(a, p, "x", 0.5)
  raises(a.limit, "limit: a positional value is not accepted; name it: limit{count = n, bytes = b}")(a, { 5 })
  raises(a.limit, "limit: a key must be the string 'count' or 'bytes', not a boolean")(a, { [true] = 1 })
  raises(a.limit, "bad argument #2 to 'limit' (limits: table expected, got number)")(a, 5)
  for name, f in pairs { malloc = a.malloc, usable_size = a.usable_size, check = a.check, read = a.read } do
    local err = raises(f, "bad argument #2 to '" .. name .. "'")(a, {})
    assert(not err:find("'?'", 1, true), err)
  end
  eq(a:usage().failures, 0, "bad arguments are not failures")
  a:free(p)
  assert_empty(a)
end)

---------------------------------------------------------------------------
-- Lua on a scralloc heap

local WORKLOAD = [[
local n = ...
-- tables and strings
local t = {}
for i = 1, n do t[i] = { id = i, name = "item" .. i, tags = { i % 3, i % 5 } } end
local parts = {}
for i = 1, n do parts[#parts + 1] = string.format("%d:%s", t[i].id, t[i].name) end
local s = table.concat(parts, ",")
table.sort(t, function(x, y) return x.name < y.name end)
-- closures
local function counter() local c = 0; return function() c = c + 1; return c end end
local counters = {}
for i = 1, 100 do counters[i] = counter() end
local total = 0
for _, f in ipairs(counters) do for _ = 1, 10 do total = total + f() end end
-- coroutines
local function gen(k) return coroutine.wrap(function() for i = 1, k do coroutine.yield(i) end end) end
local sum = 0
for i = 1, 50 do for v in gen(i) do sum = sum + v end end
local co = coroutine.create(function(a) local b = coroutine.yield(a * 2); error("co " .. b) end)
local _, dbl = coroutine.resume(co, 21)
local ok, msg = coroutine.resume(co, "done")
-- garbage: cycles, weak tables, finalizers
local collected = 0
for i = 1, 200 do
  local x, y = {}, {}
  x.other, y.other = y, x
  setmetatable(x, { __gc = function() collected = collected + 1 end })
end
local weak = setmetatable({}, { __mode = "k" })
for i = 1, 100 do weak[{}] = i end
collectgarbage("collect")
collectgarbage("incremental")
for i = 1, 1000 do local _ = { i, tostring(i) } end
collectgarbage("step", 0)
collectgarbage("generational")
for i = 1, 1000 do local _ = { i } end
collectgarbage("collect")
local left = 0
for _ in pairs(weak) do left = left + 1 end
return #s, total, sum, dbl, ok, msg:match("co done") ~= nil, collected, left,
  collectgarbage("count") > 0, t[1].name
]]

test("run: results and arguments cross as scalars", function()
  local a <close> = scralloc.new()
  local r = table.pack(a:run("return ...", nil, true, false, 42, -1.5, "a\0b", math.maxinteger))
  eq(r.n, 7, "count")
  eq(r[1], nil, "nil")
  eq(r[2], true, "true")
  eq(r[3], false, "false")
  eq(r[4], 42, "integer")
  eq(math.type(r[4]), "integer", "integer stays integer")
  eq(r[5], -1.5, "float")
  eq(r[6], "a\0b", "string with a zero byte")
  eq(r[7], math.maxinteger, "maxinteger")
  eq(select("#", a:run("")), 0, "no results")
  eq(a:run("return _VERSION"), _VERSION, "libraries are open")
  raises(a.run, "(run):1: boom")(a, "error('boom')")
  raises(a.run, "error object is a table value")(a, "error({})")
  raises(a.run, "(run):1: syntax error")(a, "x x")
  raises(a.run, "result #2 is a table")(a, "return 1, {}")
  raises(a.run, "only nil, booleans, numbers and strings")(a, "return ...", {})
  raises(a.run, "attempt to load a binary chunk")(a, string.dump(function() end))
  raises(a.run, "bad argument #2 to 'run' (code is missing)")(a)
  raises(a.run, "bad argument #2 to 'run' (code: string expected, got table)")(a, {})
  raises(a.run, "bad argument #3 to 'run' (only nil")(a, "", {})
  eq(a.allocs, 0, "every state closed")
  -- run() inside run(), each level on an allocator of its own
  local nest = "local src, n = ...; if n == 0 then return 'bottom' end; " ..
    "local b <close> = require('scralloc').new(); return b:run(src, src, n - 1)"
  eq(a:run(nest, nest, 10), "bottom", "nested runs")
  raises(a.run, "nested more than")(a, nest, nest, 1000)
  eq(a:run(nest, nest, 3), "bottom", "usable after the depth error")
  eq(a.allocs, 0, "every nested state closed")
end)

test("run: a real workload on the heap, then zero live blocks", function()
  local a <close> = scralloc.new { retain = 1 }
  local len, total, sum, dbl, ok, msg_ok, collected, left, counted, first = a:run(WORKLOAD, 2000)
  assert(len > 20000, "string length")
  eq(total, 100 * 55, "closures")
  eq(sum, 22100, "coroutines")
  eq(dbl, 42, "coroutine resume")
  eq(ok, false, "coroutine error")
  eq(msg_ok, true, "coroutine error message")
  eq(collected, 200, "finalizers of cycles")
  eq(left, 0, "weak keys collected")
  eq(counted, true, "collectgarbage count")
  eq(first, "item1", "sort")
  local u = a:usage()
  assert(u.peak_bytes > 500000, "the workload ran on the heap: peak " .. u.peak_bytes)
  assert(u.allocations > 10000, "allocations " .. u.allocations)
  eq(a.allocs, 0, "zero live blocks after the state closed")
  eq(u.live_bytes, 0, "binding live bytes")
  eq(a:validate(), true, "validate")
  -- the chunk sees its own heap through the module
  local allocs, same = a:run([[
    local scralloc = require "scralloc"
    local st = scralloc.heap_stats()
    return st.allocs, st.heap_used > 0
  ]])
  assert(allocs > 100, "heap_stats inside run: " .. tostring(allocs))
  eq(same, true, "heap_used")
  assert_empty(a, "after run")
end)

test("run: out of memory paths under the failure limit", function()
  local a <close> = scralloc.new()
  local ok_runs, oom_runs = 0, 0
  local n = 1
  while n < 60000 do
    a:limit { count = n }
    local ok, err = pcall(a.run, a, WORKLOAD, 200)
    a:limit()
    if ok then
      ok_runs = ok_runs + 1
    else
      oom_runs = oom_runs + 1
      assert(err:find("not enough memory", 1, true), err)
    end
    eq(a.allocs, 0, "zero live blocks after an OOM at allocation " .. n)
    eq(a:usage().live_bytes, 0, "binding live bytes")
    n = math.floor(n * 1.3) + 1
  end
  assert(oom_runs > 10, "OOM runs " .. oom_runs)
  assert(ok_runs > 0, "the last limits let it finish")
  eq(a:validate(), true, "validate")
  a:limit { bytes = 200000 }
  raises(a.run, "not enough memory")(a, "return #string.rep('x', 1 << 20)")
  eq(a:run("return #string.rep('x', 1000)"), 1000, "small enough")
  a:limit()
  eq(a:run("return #string.rep('x', 1 << 20)"), 1 << 20, "lifted")
  assert_empty(a)
end)

test("run: failing OS calls (mmap, munmap, madvise) under a running state", function()
  local a <close> = scralloc.new { retain = 0, large_cache = 0, huge_threshold = 64 << 10 }
  local code = [[
    local parts, big = {}, {}
    for i = 1, 40 do
      parts[#parts + 1] = string.rep(string.char(65 + i % 26), 20000 * i)
      big[i] = table.concat(parts, "", math.max(1, #parts - 3))
      if i % 7 == 0 then parts = {}; collectgarbage() end
    end
    local t = {}
    for i = 1, 200000 do t[i] = i end
    t = nil
    collectgarbage()
    return #big[40]
  ]]
  scralloc.reports(true) -- collect the core's reports of failed munmaps instead of printing them
  local want = a:run(code)
  local ok_runs, failed_runs, before = 0, 0, scralloc.debug_os_calls()
  a:run(code)
  local calls = scralloc.debug_os_calls() - before
  assert(calls > 10, "the workload makes OS calls: " .. calls)
  for n = 1, calls + 5, math.max(1, calls // 40) do
    scralloc.debug_fail_os_call(n)
    local ok, r = pcall(a.run, a, code)
    scralloc.debug_fail_os_call(0)
    if ok then
      eq(r, want, "result with OS call " .. n .. " failing")
      ok_runs = ok_runs + 1
    else
      assert(tostring(r):find("not enough memory", 1, true), r)
      failed_runs = failed_runs + 1
    end
    eq(a.allocs, 0, "zero live blocks with OS call " .. n .. " failing")
    eq(a:validate(), true, "validate")
  end
  assert(ok_runs > 0, "some runs survive their failed OS call")
  local reports, last, code = scralloc.reports()
  assert(reports > 0, "the core reported failed munmaps")
  assert(type(last) == "string" and code:match("^SCR_E"), tostring(last))
  scralloc.reports(false)
  eq(scralloc.reports(), 0, "reports reset")
  assert_empty(a)
end)

test("the core's own limit_bytes option", function()
  local a <close> = scralloc.new { limit_bytes = "2M" }
  raises(a.malloc, "SCR_ENOMEM")(a, 3 << 20)
  local p = a:malloc(1000)
  raises(a.run, "not enough memory")(a, "return #string.rep('x', 4 << 20)")
  eq(a:run("return #string.rep('x', 1 << 16)"), 1 << 16, "fits")
  a:free(p)
  assert_empty(a)
end)

test("heap_stats of the calling state", function()
  local st = scralloc.heap_stats()
  if IN_SCRALUA then
    assert(st.allocs > 0 and st.bytes > 0, "scralua runs on a scralloc heap")
  else
    eq(st, nil, "plain lua does not run on scralloc")
  end
end)

---------------------------------------------------------------------------
-- scralua

local function sh_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- Output (stdout and stderr) and exit status of a shell command.
local function run(cmd, input)
  local tmp
  if input then
    tmp = os.tmpname()
    local f = assert(io.open(tmp, "wb"))
    f:write(input)
    f:close()
    cmd = cmd .. " < " .. tmp
  end
  local p = assert(io.popen("exec 2>&1; " .. cmd .. "; echo \"[rc=$?]\""))
  local out = p:read("a")
  p:close()
  if tmp then os.remove(tmp) end
  return out
end

local SCRIPT = [[
local args = { ... }
print("argc", #arg, "select", select("#", ...), "arg0", arg[0] ~= nil)
for i = 1, #arg do io.write(arg[i], i < #arg and " " or "\n") end
local words = {}
for w in ("the quick brown fox jumps over the lazy dog"):gmatch("%a+") do words[#words + 1] = w end
table.sort(words)
print(table.concat(words, " "))
local fib = setmetatable({}, { __index = function(t, k)
  local v = k < 2 and k or t[k - 1] + t[k - 2]; t[k] = v; return v end })
print(fib[80], string.format("%.3f %q %5s|%-5s|", math.pi, "q\n", "r", "l"))
local co = coroutine.wrap(function(x) while true do x = coroutine.yield(x * 2) end end)
print(co(1), co(5), co(21))
local ok, err = pcall(error, { code = 7 })
print(ok, type(err), err.code)
print(select(2, pcall(error, "msg", 0)), utf8.char(955, 8364), #utf8.char(955))
local big = {}
for i = 1, 20000 do big[i] = ("%05d"):format(i) end
print(#table.concat(big), collectgarbage("count") > 0)
if args[1] == "fail" then error("failing on purpose") end
if args[1] == "exit" then os.exit(tonumber(args[2]), args[3] == "close") end
]]

test("scralua runs programs as lua does", function()
  if not SCRALUA then print("      (skipped: SCRALUA not set)"); return end
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. sh_quote(dir)))
  local script = dir .. "/prog.lua"
  local f = assert(io.open(script, "w"))
  f:write(SCRIPT)
  f:close()
  local mod = assert(io.open(dir .. "/mymod-v2.lua", "w"))
  mod:write("return { answer = 42 }")
  mod:close()
  local S = sh_quote(script)
  local cases = {
    { S },
    { S .. " a b 'c d'" },
    { S .. " fail" },
    { S .. " exit 3" },
    { S .. " exit 0 close" },
    { "-e 'print(1 + 1)' -e 'x = 5' -e 'print(x)'" },
    { "-e 'print(arg[0] ~= nil, arg[1], #arg)' " .. S .. " z" },
    { "'-eprint(10)'" },
    { "-W -e 'print(arg[-1], arg[-2], arg[-3], arg[-4], arg[-5])' " .. S .. " x" },
    { "-e 'error(\"boom\")'" },
    { "-e 'error({})'" },
    { "-e 'error(setmetatable({}, {__tostring = function() return \"custom\" end}))'" },
    { "-e 'x =' " },
    { "-x" },
    { "-e" },
    { "-l" },
    { "-ix" },
    { "-- " .. S .. " after-dashes" },
    { "-", "print('from stdin', ...)", },
    { "- p q", "print('stdin args', ...)" },
    { "--", "print('dashes then stdin', arg[0] ~= nil)" },
    { "", "print('no args', #arg)" },
    { "-W -e 'warn(\"one\", \"two\")' -e 'warn(\"@off\")' -e 'warn(\"hidden\")'" },
    { "-e 'warn(\"silent\")'" },
    -- '@' makes a control message only when it is the whole message
    { "-W -e 'warn(\"@off\", \"XXX\", \"@off\")' -e 'warn(\"@on\", \"y\")' -e 'warn(\"@bogus\")'" },
    { "-e 'warn(\"x\", \"@on\")' -e 'warn(\"on now\")' -e 'warn(\"@off\")' -e 'warn(\"gone\")'" },
    { "-l string -e 'print(string == require \"string\")'" },
    { "-l m=mymod-v2 -e 'print(m.answer)'" },
    { "-l mymod-v2 -e 'print(mymod and mymod.answer, _G[\"mymod-v2\"] and 1)'" },
    { "-l nosuchmodule" },
    { "-E -e 'print(1)'" },
    { "-e 'print(math.maxinteger, 2^53, 7 // 2, 7 % -3, 1e300 * 1e10)'" },
    { "-i", "x = 3\nprint(x * 2)\n" },
    { "/nonexistent/file.lua" },
  }
  local env = "cd " .. sh_quote(dir) .. " && LUA_PATH='./?.lua;;' LUA_INIT= LUA_INIT_5_4= "
  for _, c in ipairs(cases) do
    local got = run(env .. sh_quote(SCRALUA) .. " " .. c[1], c[2])
    local want = run(env .. LUA .. " " .. c[1], c[2])
    got = got:gsub(SCRALUA:gsub("%p", "%%%0"), "LUA")
    want = want:gsub(LUA:gsub("%p", "%%%0"), "LUA")
    if c[1]:find("-x", 1, true) or c[1] == "-e" or c[1] == "-l" or c[1] == "-ix" then
      got = got:gsub("  %-S [^\n]*\n", "") -- scralua documents one more option
    end
    eq(got, want, "scralua " .. c[1])
  end
  -- -v prints Lua's banner; LUA_INIT runs unless -E
  assert(run(sh_quote(SCRALUA) .. " -v"):find(_VERSION, 1, true))
  eq(run("LUA_INIT='print(\"init\")' " .. sh_quote(SCRALUA) .. " -e 'print(2)'"), "init\n2\n[rc=0]\n", "LUA_INIT")
  eq(run("LUA_INIT='print(\"init\")' " .. sh_quote(SCRALUA) .. " -E -e 'print(2)'"), "2\n[rc=0]\n", "-E")
  eq(run("LUA_INIT=@" .. S .. " " .. sh_quote(SCRALUA) .. " -e 'print(3)'"):sub(-10), "\n3\n[rc=0]\n", "LUA_INIT=@file")
  os.execute("rm -rf " .. sh_quote(dir))
end)

test("scralua: heap figures at exit", function()
  if not SCRALUA then print("      (skipped: SCRALUA not set)"); return end
  local out = run(sh_quote(SCRALUA) .. " -S -e 'local t = {} for i = 1, 1e4 do t[i] = {i} end'")
  assert(out:find("scralua: heap at exit: allocs=%d+ mmaps=%d+ bytes=%d+"), out)
  assert(out:find("scralua: after lua_close: allocs=0 ", 1, true), out)
  assert(out:find("scralua: lua peak %d+ bytes"), out)
  assert(out:find("[rc=0]", 1, true), out)
  out = run("SCRALLOC_STATS=json " .. sh_quote(SCRALUA) .. " -e 'os.exit(true)'")
  assert(out:find('scralua: heap at exit: {"allocs":', 1, true), out)
  out = run("SCRALLOC_STATS=1 SCRALLOC_RETAIN=0 " .. sh_quote(SCRALUA) ..
    " -e 'local s = require \"scralloc\"; print(s.heap_stats().allocs > 0)'")
  assert(out:find("^true\n"), out)
  assert(out:find("after lua_close: allocs=0", 1, true), out)
  out = run(sh_quote(SCRALUA) .. " -e 'print(1)'")
  eq(out, "1\n[rc=0]\n", "no figures without -S")
  -- the heap's own limit refuses Lua's allocations: the report counts them
  out = run("SCRALLOC_LIMIT_BYTES=1M SCRALLOC_STATS=1 " .. sh_quote(SCRALUA) ..
    " -e 'local t = {} for i = 1, 2e6 do t[i] = i end'")
  assert(out:find("not enough memory", 1, true), out)
  local refused = tonumber(out:match("scralua: lua peak %d+ bytes in live blocks, %d+ allocations, (%d+) refused"))
  assert(refused and refused > 0, out)
  assert(out:find("[rc=1]", 1, true), out)
  -- the report is the process's own: a child scralua started through
  -- io.popen does not inherit SCRALLOC_STATS, so what the script reads
  -- from it is the child's output only; the parent still reports
  local script = os.tmpname()
  local f = assert(io.open(script, "w"))
  f:write([[
local p = io.popen(]] .. ("%q"):format(sh_quote(SCRALUA)) .. [[ .. " -e 'print(os.getenv(\"SCRALLOC_STATS\"))' 2>&1")
io.write("child: [", p:read("a"), "]\n")
p:close()
]])
  f:close()
  out = run("SCRALLOC_STATS=1 " .. sh_quote(SCRALUA) .. " " .. sh_quote(script))
  assert(out:find("child: [nil\n]\n", 1, true), out)
  assert(out:find("scralua: heap at exit: allocs=", 1, true), out)
  -- SCRALLOC_STATS_FILE: the figures are appended to a file, not stderr
  local file = os.tmpname()
  out = run("SCRALLOC_STATS=1 SCRALLOC_STATS_FILE=" .. sh_quote(file) .. " " .. sh_quote(SCRALUA) ..
    " " .. sh_quote(script))
  eq(out, "child: [nil\n]\n[rc=0]\n", "figures in the file only")
  f = assert(io.open(file))
  local text = f:read("a")
  f:close()
  assert(text:find("^scralua: heap at exit: allocs=%d+"), text)
  assert(text:find("scralua: after lua_close: allocs=0", 1, true), text)
  out = run("SCRALLOC_STATS=1 SCRALLOC_STATS_FILE=/nonexistent/dir/f " .. sh_quote(SCRALUA) .. " -e 'print(1)'")
  assert(out:find("scralua: cannot open SCRALLOC_STATS_FILE '/nonexistent/dir/f'", 1, true), out)
  assert(out:find("scralua: heap at exit:", 1, true), out) -- on stderr instead
  os.remove(script)
  os.remove(file)
end)

test("profile: sampled blocks, their frames, the files", function()
  local a <close> = scralloc.new{ profile_rate = 1 }
  eq(a:options().profile_rate, 1, "profile_rate option")
  local ptrs = {}
  for i = 1, 50 do ptrs[i] = a:malloc(100) end
  local samples = a:profile()
  eq(#samples, 50, "every block sampled at rate 1")
  local s = samples[1]
  eq(s.size, 100, "size")
  assert(math.abs(s.bytes - 100) < 1e-6 and math.abs(s.blocks - 1) < 1e-6, "rate 1: exact")
  assert(#s.frames > 0, "frames")
  local named = false
  for _, f in ipairs(s.frames) do
    assert(type(f) == "string" and #f > 0)
    if f:find("lscr_malloc", 1, true) then named = true end
  end
  assert(named, "a frame names the binding's malloc: " .. table.concat(s.frames, " | "))
  eq(#scralloc.profile() >= 50, true, "the process-wide list has them")
  local file = os.tmpname()
  assert(a:profile_write(file, "folded"))
  local f = assert(io.open(file))
  local text = f:read("a")
  f:close()
  local total = 0
  for line in text:gmatch("[^\n]+") do
    local bytes = line:match("^.+ (%d+)$")
    assert(bytes, line)
    total = total + tonumber(bytes)
  end
  eq(total, 50 * 100, "the folded stacks' bytes: every block's, at rate 1")
  local ok, msg = a:profile_write("/nonexistent/dir/x", "top")
  eq(ok, nil, "unwritable")
  assert(msg:find("/nonexistent/dir/x", 1, true), msg)
  raises(function() a:profile_write(file, "svg") end)
  os.remove(file)
  for i = 1, 25 do a:free(ptrs[i]) end
  eq(#a:profile(), 25, "freed blocks leave")
  eq(a:profile_rate(0), 0, "off")
  local q = a:malloc(100)
  eq(#a:profile(), 25, "no sample while off")
  a:free(q)
  for i = 26, 50 do a:free(ptrs[i]) end
  eq(#a:profile(), 0, "all gone")
end)

test("the fuzzer prints the seed and a shrunk failing list", function()
  local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
  local interp = arg[-1] or LUA
  local out = run(sh_quote(interp) .. " " .. sh_quote(here .. "/fuzz.lua") .. " 300 5 --plant")
  assert(out:find("fuzz: FAILED, seed 5, at step", 1, true), out)
  assert(out:find("shrunk from %d+ to 3 operations"), out)
  assert(out:find("planted bug", 1, true), out)
  assert(out:find("replay with: .*fuzz.lua 300 5 %-%-plant"), out)
  assert(out:find("[rc=1]", 1, true), out)
  out = run(sh_quote(interp) .. " " .. sh_quote(here .. "/fuzz.lua") .. " 200 9")
  assert(out:find("fuzz: ok, seed 9, 200 steps", 1, true), out)
end)

---------------------------------------------------------------------------

print(string.format("%d passed, %d failed", passed, failed))
os.exit(failed == 0 and 0 or 1, true)
