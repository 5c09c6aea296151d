-- Lua workloads for comparing allocators: run under lua5.4 (glibc malloc,
-- or another malloc through LD_PRELOAD) and under scralua (a scralloc heap).
--
--   lua5.4 tests/lua/bench.lua [scale]      scralua -S tests/lua/bench.lua [scale]
--
-- Prints the CPU seconds of each workload and the total; `make bench-lua`
-- runs it under every allocator it finds, with wall time and peak RSS.

local scale = tonumber(arg and arg[1]) or 1

local function tables(n)   -- many small tables, then dropped: size-class churn
  for _ = 1, 4 do
    local t = {}
    for i = 1, n do t[i] = { i, tostring(i), { x = i, y = -i } } end
    local keep = {}
    for i = 1, n, 7 do keep[#keep + 1] = t[i] end
    t = nil
    collectgarbage()
  end
end

local function strings(n)  -- growing buffers and big strings: reallocs, large blocks
  for _ = 1, 3 do
    local parts = {}
    for i = 1, n do parts[#parts + 1] = ("line %d: %s"):format(i, ("x"):rep(i % 200)) end
    local s = table.concat(parts, "\n")
    local words = 0
    for _ in s:gmatch("%d+") do words = words + 1 end
    local big = s:rep(3):upper()
    parts, s, big = nil, nil, nil
    collectgarbage()
  end
end

local function closures(n) -- closures, upvalues, coroutines
  local sum = 0
  for i = 1, n // 10 do
    local co = coroutine.wrap(function(a)
      local fs = {}
      for k = 1, 10 do fs[k] = function() return a + k end end
      for k = 1, 10 do a = coroutine.yield(fs[k]()) end
    end)
    local v = co(i)
    for _ = 1, 9 do v = co(v) end
    sum = sum + v
  end
  return sum
end

local function resize(n)   -- tables growing and shrinking: rehash, realloc of arrays
  local t = {}
  for round = 1, 6 do
    for i = 1, n do t[i] = i end
    for i = n, 1, -1 do t[i] = nil end
    for i = 1, n // 4 do t["k" .. i] = i end
    for i = 1, n // 4 do t["k" .. i] = nil end
    collectgarbage("step", 0)
  end
end

local total = os.clock()
for _, w in ipairs { { "tables", tables, 200000 }, { "strings", strings, 100000 },
                     { "closures", closures, 300000 }, { "resize", resize, 300000 } } do
  local t0 = os.clock()
  w[2](math.floor(w[3] * scale))
  io.write(string.format("%-9s %6.2fs  ", w[1], os.clock() - t0))
end
local ok, scralloc = pcall(require, "scralloc")
local on_scralloc = ok and scralloc.heap_stats() ~= nil
print(string.format("total %6.2fs  (%s)", os.clock() - total,
  on_scralloc and "scralua: a scralloc heap" or (os.getenv("LD_PRELOAD") or "glibc malloc")))
