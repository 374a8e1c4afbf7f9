-- Criteo's click logs in their TSV layout (the Kaggle Display Advertising Challenge's
-- train.txt, the Terabyte day_N files), for pipelines/dlrm_criteo.yaml. A line is
--   label \t I1 ... I13 \t C1 ... C26
-- label 0/1, I integers (possibly negative or empty), C 32-bit hexadecimal strings (or
-- empty). As DLRM's preprocessing: dense = log(max(I, 0) + 1), an empty I is 0; a category
-- is its hexadecimal value modulo its table's size (DLRM's --max-ind-range hashing), an
-- empty one 0; rows are stored 1-based, one per bag.
-- Options (data.source_options): file (required), table_sizes (a list of 26, or one number
-- for all; default 100000), limit (the first N lines).
-- The file is indexed once (the byte offset of each line); samples are then read where they
-- lie, so readers need no more memory than the index.
local ember = require 'ember'
local jagged = require 'ember.data.jagged'

local NUM_DENSE, NUM_SPARSE = 13, 26

return function(o)
  o = o or {}
  if type(o.file) ~= 'string' then error("criteo_tsv: expected source_options.file, the TSV file's path", 0) end
  local sizes = {}
  for t = 1, NUM_SPARSE do
    local v = o.table_sizes or 100000
    sizes[t] = type(v) == 'table' and v[t] or v
    if type(sizes[t]) ~= 'number' or sizes[t] < 1 then
      error(string.format('criteo_tsv: table_sizes must be a number or a list of %d numbers >= 1', NUM_SPARSE), 0)
    end
  end
  local f, err = io.open(o.file, 'rb')
  if not f then error(string.format("criteo_tsv: cannot read '%s': %s", o.file, err), 0) end
  -- the line index: where each line starts
  local starts, n, pos = {}, 0, 0
  local limit = o.limit or math.huge
  for line in f:lines() do
    if n >= limit then break end
    if line ~= '' then
      n = n + 1
      starts[n] = pos
    end
    pos = pos + #line + 1
  end

  local ds = {}
  function ds:size() return n end
  function ds:get(i)
    f:seek('set', starts[i])
    local line = f:read('*l')
    if not line then error(string.format("criteo_tsv: '%s' line %d: cannot be read", o.file, i), 0) end
    local cols, c = {}, 0
    for field in (line .. '\t'):gmatch('([^\t]*)\t') do
      c = c + 1
      cols[c] = field
    end
    if c ~= 1 + NUM_DENSE + NUM_SPARSE then
      error(string.format("'%s' line %d: %d columns, expected %d (label, %d integers, %d categories)", o.file, i, c,
        1 + NUM_DENSE + NUM_SPARSE, NUM_DENSE, NUM_SPARSE), 0)
    end
    local label = tonumber(cols[1])
    if label ~= 0 and label ~= 1 then
      error(string.format("'%s' line %d: the label is '%s', expected 0 or 1", o.file, i, cols[1]), 0)
    end
    local dense = ember.empty({ NUM_DENSE })
    for j = 1, NUM_DENSE do
      local s = cols[1 + j]
      local v = s == '' and 0 or tonumber(s)
      if not v then error(string.format("'%s' line %d: I%d is '%s', expected an integer", o.file, i, j, s), 0) end
      dense[j] = math.log(math.max(v, 0) + 1)
    end
    local parts = {}
    for t = 1, NUM_SPARSE do
      local s = cols[1 + NUM_DENSE + t]
      local v = s == '' and 0 or tonumber(s, 16)
      if not v then error(string.format("'%s' line %d: C%d is '%s', expected hexadecimal", o.file, i, t, s), 0) end
      parts[t] = { v % sizes[t] + 1 }
    end
    return { dense = dense, sparse = jagged.sample(parts), label = label }
  end
  return ds
end
