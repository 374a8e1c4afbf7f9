-- examples/criteo_sample.lua - writes a file in Criteo's TSV layout (label, 13 integers,
-- 26 eight-digit hexadecimal categories, tab-separated; some fields empty, as in the real
-- logs), for trying pipelines/dlrm_criteo.yaml without the data set:
--   ember examples/criteo_sample.lua runs/criteo_sample.tsv 20000 [seed]
-- The label depends on I1 and on C1's value, so a model has something to learn.
local path, n, seed = arg[1], tonumber(arg[2] or 10000), tonumber(arg[3] or 1)
if not path then
  io.stderr:write('usage: ember examples/criteo_sample.lua OUT.tsv [LINES] [SEED]\n')
  os.exit(2)
end
local dir = path:match('^(.*)/[^/]*$')
if dir then os.execute("mkdir -p '" .. dir .. "'") end
local f = assert(io.open(path, 'w'))
math.randomseed(seed)
for _ = 1, n do
  local cols = {}
  local i1 = math.random(0, 50)
  local c1 = math.random(0, 99)
  local logit = (i1 - 25) / 10 + (c1 % 2 == 0 and 1.5 or -1.5)
  cols[1] = math.random() < 1 / (1 + math.exp(-logit)) and '1' or '0'
  cols[2] = tostring(i1)
  for j = 2, 13 do cols[j + 1] = math.random() < 0.1 and '' or tostring(math.random(-2, 1000)) end
  cols[15] = string.format('%08x', c1 * 2654435761 % 4294967296)
  for j = 2, 26 do cols[14 + j] = math.random() < 0.05 and '' or string.format('%08x', math.random(0, 2 ^ 31 - 1)) end
  f:write(table.concat(cols, '\t'), '\n')
end
f:close()
