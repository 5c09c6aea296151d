-- A Lua program whose own state runs on a scralloc heap (run it with
-- scralua), driving a second allocator object of its own.
--   SCRALLOC_STATS=1 build/release/lua/scralua examples/demo.lua
local scralloc = require "scralloc"

-- Lua's own work: tables, strings and closures, all on scralua's heap
local words = {}
for i = 1, 200000 do words[i] = ("w%d"):format(i % 5000) end
local counts = {}
for _, w in ipairs(words) do counts[w] = (counts[w] or 0) + 1 end
print(("%d distinct words; this state's heap: %s"):format(
  #(function() local t = {} for k in pairs(counts) do t[#t + 1] = k end return t end)(),
  scralloc.heap_stats and scralloc.heap_stats().heap_used .. " bytes used" or "?"))

-- an allocator object: the seed's reproducer with and without retention
for _, retain in ipairs{0, 1} do
  local a <close> = scralloc.new{retain = retain}
  for _ = 1, 20000 do a:free(a:malloc(64)) end
  local s = a:stats()
  print(("retain=%d: 20000 malloc/free pairs of 64 B cost %d mmap, %d munmap; end state mmaps=%d bytes=%d")
    :format(retain, s.mmap_calls, s.munmap_calls, a.mmaps, a.bytes))
end
