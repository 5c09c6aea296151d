-- An allocation-heavy Lua workload for LD_PRELOAD runs: tables, strings,
-- closures, coroutines, full collections.  Checks its own results.
local scale = tonumber(arg and arg[1]) or 1
local function build(n)
  local t = {}
  for i = 1, n do
    t[i] = { id = i, name = "item" .. i, tags = { i % 7, i % 11, string.rep("x", i % 97) } }
  end
  return t
end
local sum = 0
for round = 1, 20 * scale do
  local t = build(5000)
  local s = {}
  for i = 1, #t, 3 do s[#s + 1] = t[i].name end
  local joined = table.concat(s, ",")
  sum = sum + #joined + #t
  local co = coroutine.wrap(function()
    for i = 1, 1000 do coroutine.yield(string.format("%d:%s", i, ("y"):rep(i % 50))) end
  end)
  for _ = 1, 1000 do sum = sum + #co() end
  if round % 5 == 0 then collectgarbage("collect") end
end
local big = {}
for i = 1, 200 do big[i] = string.rep(string.char(65 + i % 26), 1000 * i) end
for i = 1, 200 do assert(#big[i] == 1000 * i) end
assert(sum > 0)
print("lua workload ok", sum)
