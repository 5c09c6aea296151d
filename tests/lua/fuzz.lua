-- A seeded, model-checked random walk over a scralloc allocator.
--
--   lua5.4 tests/lua/fuzz.lua [steps [seed]] [--plant] [--trace]
--   scralua tests/lua/fuzz.lua [steps [seed]]   (the fuzzer itself on a scralloc heap)
--
-- The operations (malloc, calloc, aligned_alloc, realloc, free, write,
-- read-back, trim, frees of foreign, interior and freed addresses, writes
-- out of bounds, failure limits and failing OS calls) are generated from
-- the seed first, then run against the allocator and a model kept here:
-- every byte of every live block, no two blocks overlapping, the counters
-- equal to the model, and nothing mapped after trimming an empty heap.
-- A failure prints the seed and the shortest operation list that still
-- fails (found by removing operations while the failure stays), and the
-- command that replays it.  --plant adds a deliberate bug to the model, to
-- show the shrinking at work.  --trace prints each operation to stderr
-- before running it: the last one printed names the culprit of a crash.

local scralloc = require "scralloc"

local steps, seed, plant, trace = nil, nil, false, false
for _, a in ipairs(arg) do
  if a == "--plant" then plant = true
  elseif a == "--trace" then trace = true
  elseif not steps then steps = assert(math.tointeger(tonumber(a)), "steps: an integer")
  elseif not seed then seed = assert(math.tointeger(tonumber(a)), "seed: an integer")
  else error("usage: fuzz.lua [steps [seed]] [--plant] [--trace]") end
end
steps = steps or 2000
seed = seed or os.time()

---------------------------------------------------------------------------
-- generation: a list of operations, a pure function of the seed

local function gen_size(r)
  local k = r(100)
  if k <= 55 then return r(0, 256)
  elseif k <= 82 then return r(257, 4096)
  elseif k <= 95 then return r(4097, 65536)
  elseif k <= 99 then return r(65537, 600000)
  else return r(1 << 20, 5 << 19) end
end

local KINDS = {
  { "malloc", 20 }, { "calloc", 6 }, { "aligned", 5 }, { "realloc", 12 },
  { "free", 20 }, { "write", 10 }, { "read", 5 }, { "trim", 2 },
  { "bad_foreign", 2 }, { "bad_interior", 3 }, { "bad_freed", 3 }, { "bad_bounds", 2 },
  { "limit_count", 1 }, { "limit_bytes", 1 }, { "unlimit", 4 }, { "os_fail", 2 },
  { "time", 2 },
}
local WEIGHT = 0
for _, k in ipairs(KINDS) do WEIGHT = WEIGHT + k[2] end

local function generate(n, s)
  math.randomseed(s * -7046029254386353131) -- spread nearby seeds (0x9E3779B97F4A7C15)
  local r = math.random
  local ops = {}
  local function one_of(t) return t[r(#t)] end
  ops.options = {
    retain = r(0, 3),
    retain_bytes = one_of { 0, 1 << 16, 8 << 20, math.maxinteger }, -- the last: no cap, as the default
    large_cache = r(0, 8),
    large_cache_bytes = one_of { 0, 1 << 20, 16 << 20 },
    huge_threshold = one_of { 64 << 10, 128 << 10, 1 << 20, 2 << 20 },
    madv_free_below = one_of { 0, 1 << 20, 1 << 40 },
    purge_delay_ms = one_of { 0, 0, 600000 }, -- passes come due only with "time" ops: seeds replay
    decommit_batch = one_of { 0, 0, 1 << 17, 1 << 20 },
  }
  for i = 1, n do
    local w, kind = r(WEIGHT), nil
    for _, k in ipairs(KINDS) do
      w = w - k[2]
      if w <= 0 then kind = k[1]; break end
    end
    local op = { kind, ref = r(1 << 30), uid = i }
    if kind == "malloc" then op.size = gen_size(r)
    elseif kind == "os_fail" then op.size = gen_size(r); op.nth = r(1, 3)
    elseif kind == "time" then op.ms = r(1, 3) * 200000
    elseif kind == "calloc" then op.count = r(0, 64); op.size = r(0, 300)
    elseif kind == "aligned" then op.align = 1 << r(0, 16); op.size = gen_size(r)
    elseif kind == "realloc" then op.size = r(20) == 1 and 0 or gen_size(r)
    elseif kind == "write" then op.off = r(0, 1 << 30); op.len = r(0, 80); op.byte = r(0, 255)
    elseif kind == "bad_foreign" then op.variant = r(4)
    elseif kind == "bad_interior" then op.off = r(1 << 30)
    elseif kind == "limit_count" then op.count = r(0, 3)
    elseif kind == "limit_bytes" then op.extra = r(0, 200000)
    end
    ops[i] = op
  end
  return ops
end

local function describe(op)
  local t = {}
  for k, v in pairs(op) do
    if k ~= 1 and k ~= "ref" and k ~= "uid" and k ~= "target" then t[#t + 1] = k .. "=" .. tostring(v) end
  end
  table.sort(t)
  if op.target then table.insert(t, 1, "block of op " .. op.target) end
  return string.format("%s{%s}  (op %d)", op[1], table.concat(t, ", "), op.uid)
end

---------------------------------------------------------------------------
-- execution against the model

local CHECK_EVERY = 100

local function fail(fmt, ...) error({ msg = string.format(fmt, ...) }, 0) end

-- Deterministic contents: the block's id and a generation, repeated.
local function pattern(id, gen, n)
  local unit = string.pack("<I4I4", id % (1 << 32), gen % (1 << 32))
  return string.rep(unit, n // 8 + 1):sub(1, n)
end

local function run_ops(ops, tally)
  assert(ops.options, "operations carry their heap options")
  local a <close> = scralloc.new(ops.options)
  local other <close> = scralloc.new()
  local foreign = other:malloc(64)
  local live, byaddr, freed = {}, {}, {}
  local live_bytes = 0                      -- sum of usable sizes
  local count_left, bytes_limit = nil, nil  -- the model of a:limit{}
  local nextid = 0

  local function expect_error(code, f, ...)
    local ok, err = pcall(f, ...)
    if ok then fail("expected an error (%s), the call succeeded", table.concat(code, " or ")) end
    err = tostring(err)
    for _, c in ipairs(code) do
      if err:find(c, 1, true) then return err end
    end
    fail("expected %s, got: %s", table.concat(code, " or "), err)
  end

  local function check_block(b)
    local got = a:read(b.addr, b.us)
    if got ~= b.content then
      local i = 1
      while got:byte(i) == b.content:byte(i) do i = i + 1 end
      fail("block #%d at 0x%x (%d usable bytes): byte %d is %d, the model says %d",
        b.id, b.addr, b.us, i - 1, got:byte(i), b.content:byte(i))
    end
  end

  local function check_all()
    local sorted = {}
    for i, b in ipairs(live) do sorted[i] = b; check_block(b) end
    table.sort(sorted, function(x, y) return x.addr < y.addr end)
    for i = 2, #sorted do
      local p, q = sorted[i - 1], sorted[i]
      if p.addr + p.us > q.addr then
        fail("blocks #%d [0x%x, +%d) and #%d at 0x%x overlap", p.id, p.addr, p.us, q.id, q.addr)
      end
    end
    local st = a:stats()
    if st.heap_used ~= live_bytes then fail("heap_used %d, the model says %d", st.heap_used, live_bytes) end
    -- a block whose usable size is a class size lives in that class
    local per_class, large = {}, 0
    for _, b in ipairs(live) do
      local c = scralloc.size_class(b.us)
      if c and scralloc.class_size(c) == b.us then per_class[c] = (per_class[c] or 0) + 1
      else large = large + 1 end
    end
    for i, c in ipairs(st.classes) do
      if c.live ~= (per_class[i] or 0) then
        fail("class %d (%d bytes): %d live blocks, the model says %d", i, c.block_size, c.live, per_class[i] or 0)
      end
    end
    if st.large_allocs ~= large then fail("large_allocs %d, the model says %d", st.large_allocs, large) end
    -- the retention bounds of the options
    local o = ops.options
    for i, c in ipairs(st.classes) do
      if c.retained > o.retain then fail("class %d retains %d empty pages, retain = %d", i, c.retained, o.retain) end
    end
    -- (pages waiting for the batched decommit count in dirty_bytes and
    -- are past retain_bytes by definition: decommit_batch bounds them)
    if o.decommit_batch == 0 and st.retained_bytes + st.dirty_bytes > o.retain_bytes then
      fail("retained_bytes %d + dirty_bytes %d > retain_bytes %d", st.retained_bytes, st.dirty_bytes, o.retain_bytes)
    end
    if o.decommit_batch == 0 and o.purge_delay_ms == 0 and st.dirty_bytes ~= 0 then
      fail("dirty_bytes %d without a purge delay", st.dirty_bytes)
    end
    if o.decommit_batch > 0 and o.retain_bytes < (1 << 40) -- (a run: at most a segment of 4 MiB)
        and st.dirty_bytes > o.retain_bytes + o.decommit_batch + (4 << 20) then
      fail("dirty_bytes %d past retain_bytes %d and decommit_batch %d", st.dirty_bytes, o.retain_bytes, o.decommit_batch)
    end
    if st.cached_blocks > o.large_cache then fail("cached_blocks %d > large_cache %d", st.cached_blocks, o.large_cache) end
    if st.cached_bytes > o.large_cache_bytes then fail("cached_bytes %d > large_cache_bytes %d", st.cached_bytes, o.large_cache_bytes) end
    if a:usage().live_bytes ~= live_bytes then
      fail("binding live bytes %d, the model says %d", a:usage().live_bytes, live_bytes)
    end
    a:validate()
  end

  -- The first run picks a block by op.ref and records its creator in
  -- op.target; replays (shrinking) take that same block, or none, so that
  -- dropping unrelated operations does not change what an operation does.
  local function pick(op)
    if op.target then
      for _, b in ipairs(live) do
        if b.uid == op.target then return b end
      end
      return nil
    end
    if #live == 0 then return nil end
    local b = live[1 + op.ref % #live]
    op.target = b.uid
    return b
  end

  -- Would the limits admit an allocation of n more bytes?  (and count it)
  local function admitted(n)
    if count_left == 0 or (bytes_limit and live_bytes + n > bytes_limit) then return false end
    if count_left then count_left = count_left - 1 end
    return true
  end

  local function add(addr, size, keep, op, uid)
    if addr % 16 ~= 0 then fail("address 0x%x is not 16-byte aligned", addr) end
    if byaddr[addr] then fail("address 0x%x handed out twice (block #%d is live)", addr, byaddr[addr].id) end
    nextid = nextid + 1
    local us = a:usable_size(addr)
    if us < size then fail("usable size %d < requested %d", us, size) end
    local b = { addr = addr, size = size, us = us, id = nextid, op = op, uid = uid or op.uid }
    b.content = (keep or "") .. pattern(nextid, 0, us - #(keep or ""))
    a:write(b.addr, b.content)
    live[#live + 1] = b
    byaddr[addr] = b
    live_bytes = live_bytes + us
    return b
  end

  local function remove(b)
    for i, x in ipairs(live) do
      if x == b then table.remove(live, i); break end
    end
    byaddr[b.addr] = nil
    live_bytes = live_bytes - b.us
    freed[#freed + 1] = b.addr
    if #freed > 64 then table.remove(freed, 1) end
  end

  -- An allocation the limits may refuse: f(...) must then fail with ENOMEM.
  local function alloc(n, may_fail, f, ...)
    if not admitted(n) then
      expect_error({ "SCR_ENOMEM" }, f, ...)
      return nil
    end
    local ok, p = pcall(f, ...)
    if not ok then
      if may_fail and tostring(p):find("SCR_ENOMEM", 1, true) then return nil end
      fail("allocation of %d bytes failed: %s", n, tostring(p))
    end
    return p
  end

  local exec = {}
  function exec.malloc(op)
    local p = alloc(op.size, false, a.malloc, a, op.size)
    if p then add(p, op.size, nil, op) end
  end
  function exec.os_fail(op)
    scralloc.debug_fail_os_call(op.nth)
    local ok, p = pcall(alloc, op.size, true, a.malloc, a, op.size)
    scralloc.debug_fail_os_call(0)
    if not ok then error(p, 0) end
    if p then add(p, op.size, nil, op) end
  end
  function exec.time(op) -- purge passes come due (purge_delay_ms)
    scralloc.debug_advance_clock(op.ms)
  end
  function exec.calloc(op)
    local n = op.count * op.size
    local p = alloc(n, false, a.calloc, a, op.count, op.size)
    if p then
      if a:read(p, n) ~= string.rep("\0", n) then fail("calloc(%d, %d) is not zeroed", op.count, op.size) end
      add(p, n, nil, op)
    end
  end
  function exec.aligned(op)
    local p = alloc(op.size, false, a.aligned_alloc, a, op.align, op.size)
    if p then
      if p % op.align ~= 0 then fail("aligned_alloc(%d) returned 0x%x", op.align, p) end
      add(p, op.size, nil, op)
    end
  end
  function exec.realloc(op)
    local b = pick(op)
    if not b then return end
    if op.size == 0 then
      if a:realloc(b.addr, 0) ~= nil then fail("realloc(p, 0) returned a block") end
      remove(b)
      return
    end
    local grow = op.size > b.us and op.size - b.us or 0
    local q
    if grow > 0 then
      q = alloc(grow, false, a.realloc, a, b.addr, op.size)
      if not q then check_block(b); return end -- refused: untouched
    else
      q = a:realloc(b.addr, op.size)
    end
    local keep = math.min(b.us, op.size)
    local kept = a:read(q, keep)
    if kept ~= b.content:sub(1, keep) then fail("realloc to %d lost the first %d bytes of block #%d", op.size, keep, b.id) end
    remove(b)
    if b.addr ~= q then freed[#freed] = b.addr else freed[#freed] = nil end
    add(q, op.size, kept, op, b.uid)
  end
  function exec.free(op)
    local b = pick(op)
    if not b then return end
    if plant and b.op[1] == "calloc" and #live >= 2 then fail("planted bug: freed a calloc'd block with another block live") end
    a:free(b.addr)
    remove(b)
  end
  function exec.write(op)
    local b = pick(op)
    if not b then return end
    local off = op.off % (b.us + 1)
    local len = math.min(op.len, b.us - off)
    local s = string.rep(string.char(op.byte), len)
    a:write(b.addr, s, off)
    b.content = b.content:sub(1, off) .. s .. b.content:sub(off + len + 1)
  end
  function exec.read(op)
    local b = pick(op)
    if b then check_block(b) end
  end
  function exec.trim()
    a:trim()
    local st = a:stats()
    if st.retained_pages ~= 0 or st.cached_blocks ~= 0 or st.dirty_bytes ~= 0 then
      fail("after trim: retained_pages=%d cached_blocks=%d dirty_bytes=%d", st.retained_pages, st.cached_blocks, st.dirty_bytes)
    end
    if #live == 0 then
      if st.mmaps ~= 0 or st.bytes ~= 0 then
        fail("trim of an empty heap left mmaps=%d bytes=%d", st.mmaps, st.bytes)
      end
    end
  end
  function exec.bad_foreign(op)
    local addr = ({ foreign, 16, 4096, -16 })[op.variant]
    expect_error({ "SCR_EFOREIGN" }, a.free, a, addr)
  end
  function exec.bad_interior(op)
    local b = pick(op)
    if not b or b.us < 2 then return end
    expect_error({ "SCR_EINTERIOR" }, a.free, a, b.addr + 1 + op.off % (b.us - 1))
  end
  function exec.bad_freed(op)
    if #freed == 0 then return end
    local addr = freed[1 + op.ref % #freed]
    if byaddr[addr] then return end -- handed out again: a good free
    for _, b in ipairs(live) do
      if addr > b.addr and addr < b.addr + b.us then
        expect_error({ "SCR_EINTERIOR" }, a.free, a, addr)
        return
      end
    end
    expect_error({ "SCR_EDOUBLEFREE", "SCR_ENOTALLOC", "SCR_EFOREIGN", "SCR_EINTERIOR" }, a.free, a, addr)
  end
  function exec.bad_bounds(op)
    local b = pick(op)
    if not b then return end
    expect_error({ "outside" }, a.write, a, b.addr, "xy", b.us - 1)
    expect_error({ "outside" }, a.read, a, b.addr, b.us + 1)
  end
  function exec.limit_count(op)
    a:limit { count = op.count, bytes = bytes_limit }
    count_left = op.count
  end
  function exec.limit_bytes(op)
    bytes_limit = live_bytes + op.extra
    a:limit { count = count_left, bytes = bytes_limit }
  end
  function exec.unlimit()
    a:limit()
    count_left, bytes_limit = nil, nil
  end

  -- The walk stays bounded: past these, allocations turn into frees.
  local MAX_LIVE, MAX_BYTES = 1500, 48 << 20
  local ALLOCATING = { malloc = true, calloc = true, aligned = true, os_fail = true, realloc = true }

  for i, op in ipairs(ops) do
    if ALLOCATING[op[1]] and (#live >= MAX_LIVE or live_bytes >= MAX_BYTES) then
      op = { "free", ref = op.ref, uid = op.uid }
    end
    if trace then io.stderr:write("fuzz: step ", i, ": ", describe(op), "\n"); io.stderr:flush() end
    local ok, err = pcall(function()
      exec[op[1]](op)
      if tally then
        tally[op[1]] = (tally[op[1]] or 0) + 1
        tally.max_live = math.max(tally.max_live, #live)
        tally.max_bytes = math.max(tally.max_bytes, live_bytes)
      end
      local n = a.allocs
      if n ~= #live then fail("allocs = %d, the model has %d live blocks", n, #live) end
      if i % CHECK_EVERY == 0 then check_all() end
    end)
    if not ok then
      return false, i, type(err) == "table" and err.msg or tostring(err)
    end
  end
  local ok, err = pcall(function()
    a:limit()
    check_all()
    while #live > 0 do
      local b = live[#live]
      a:free(b.addr)
      remove(b)
    end
    a:trim()
    local st = a:stats()
    if st.allocs ~= 0 or st.mmaps ~= 0 or st.bytes ~= 0 then
      fail("after freeing everything and trim: allocs=%d mmaps=%d bytes=%d", st.allocs, st.mmaps, st.bytes)
    end
    other:free(foreign)
  end)
  if not ok then return false, #ops + 1, type(err) == "table" and err.msg or tostring(err) end
  return true
end

---------------------------------------------------------------------------
-- shrinking: drop chunks of operations while the run still fails

local function shrink(ops, budget)
  local replays = 0
  local function fails(cand)
    replays = replays + 1
    local ok, at = run_ops(cand)
    if ok then return nil end
    return { options = cand.options, table.unpack(cand, 1, math.min(at, #cand)) }
  end
  local chunk = #ops // 2
  while chunk >= 1 and replays < budget do
    local i, progress = 1, false
    while i <= #ops and replays < budget do
      local cand = { options = ops.options }
      for j = 1, #ops do
        if j < i or j >= i + chunk then cand[#cand + 1] = ops[j] end
      end
      local smaller = fails(cand)
      if smaller then ops, progress = smaller, true else i = i + chunk end
    end
    if not progress then chunk = chunk // 2 end
  end
  return ops, replays
end

---------------------------------------------------------------------------

scralloc.reports(true) -- the core's reports of failed OS calls: counted, not printed
local where = scralloc.heap_stats() and "inside scralua" or "on " .. _VERSION
local t0 = os.clock()
local ops = generate(steps, seed)
local optlist = {}
for k, v in pairs(ops.options) do optlist[#optlist + 1] = k .. " = " .. v end
table.sort(optlist)
print(string.format("fuzz: seed %d, %d steps (%s); scralloc.new{%s}", seed, steps, where,
  table.concat(optlist, ", ")))
local tally = { max_live = 0, max_bytes = 0 }
local ok, at, msg = run_ops(ops, tally)
if ok then
  local line = string.format("fuzz: ok, seed %d, %d steps in %.2fs, up to %d live blocks, %d bytes",
    seed, steps, os.clock() - t0, tally.max_live, tally.max_bytes)
  local own = scralloc.heap_stats()
  if own then line = line .. string.format("; the fuzzer's own heap: %d live blocks, %d bytes", own.allocs, own.bytes) end
  print(line)
  local kinds = {}
  for _, k in ipairs(KINDS) do kinds[#kinds + 1] = k[1] .. "=" .. (tally[k[1]] or 0) end
  print("fuzz: operations: " .. table.concat(kinds, " "))
  os.exit(0, true)
end
print(string.format("fuzz: FAILED, seed %d, at step %d: %s", seed, at, msg))
local failing = { options = ops.options, table.unpack(ops, 1, math.min(at, #ops)) }
local small, replays = shrink(failing, 3000)
local ok2, at2, msg2 = run_ops(small)
print(string.format("fuzz: shrunk from %d to %d operations (%d replays); it fails with: %s",
  #failing, #small, replays, ok2 and "(no longer fails)" or msg2))
for i, op in ipairs(small) do
  print(string.format("fuzz:   %3d  %s", i, describe(op)))
end
print(string.format("fuzz: replay with: %s %s %d %d%s", arg[-1] or "lua5.4", arg[0], steps, seed,
  plant and " --plant" or ""))
os.exit(1, true)
