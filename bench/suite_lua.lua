-- Breadth suite: a Lua 5.4 workload run unchanged by the lua5.4
-- interpreter, whose every table, string and closure comes from malloc
-- (lua.c's allocator is realloc/free): string building, tables of
-- records, sorting, closures, and the garbage collector freeing them.
--
--     lua5.4 bench/suite_lua.lua [rounds]
local rounds = tonumber(arg and arg[1]) or 8
if not rounds or rounds < 1 then error("rounds must be a positive number") end

local check = 0
local keep = {} -- a long-lived table that turns over slowly
for r = 1, rounds do
  -- records built from strings, indexed two ways
  local byname, list = {}, {}
  for i = 1, 20000 do
    local name = "item" .. ((i * 7919 + r) % 50000)
    local rec = { name = name, value = (i * 31 + r) % 1000, tags = { "a" .. i % 13, "b" .. i % 7 } }
    byname[name] = rec
    list[#list + 1] = rec
  end
  table.sort(list, function(a, b)
    if a.value ~= b.value then return a.value < b.value end
    return a.name < b.name
  end)
  -- text assembled piece by piece, then split again
  local parts = {}
  for i = 1, #list, 5 do parts[#parts + 1] = list[i].name .. "=" .. list[i].value end
  local text = table.concat(parts, ",")
  local n = 0
  for k, v in text:gmatch("(%w+)=(%d+)") do
    n = n + #k + tonumber(v)
  end
  -- closures capturing fresh upvalues
  local fs = {}
  for i = 1, 5000 do
    local x = i
    fs[i] = function(y) return x + y end
  end
  for i = 1, #fs do n = n + fs[i](r) end
  keep[r % 50 + 1] = list -- some data outlives its round
  check = check + n
end
print(string.format("lua rounds=%d check=%d", rounds, check))
