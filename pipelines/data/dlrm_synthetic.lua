-- DLRM's random data (dlrm_data_pytorch.py, --data-generation=random) with a planted signal,
-- for pipelines/dlrm_synthetic.yaml. Each sample is a fixed function of (seed, its number),
-- so every reader, every run and every rank count sees the same data:
--   dense   float32 [num_dense], uniform in [0, 1)                (DLRM: ra.rand(n, m_den))
--   sparse  one bag per table: its size drawn in [1, num_indices_per_lookup] (round(max(1,
--           r * min(rows, L))), or L when fixed), its rows round(r * (rows - 1)) for r uniform,
--           repeats removed and sorted (np.unique), stored 1-based
--   label   0/1: DLRM draws it uniform (nothing to learn); here it is drawn from
--           sigmoid(signal * (w . (dense - 0.5) + mean over bags of a hidden score per row)),
--           w and the scores fixed by the seed, so ROC AUC measures learning.
-- Options (data.source_options): num_samples (8192), num_dense (13), table_sizes (list,
-- default 26 tables of 1000 rows), num_indices_per_lookup (10), fixed (false), seed (1),
-- signal (3).
local ember = require 'ember'
local source = require 'ember.data.source'
local jagged = require 'ember.data.jagged'

return function(o)
  o = o or {}
  local n = o.num_samples or 8192
  local m_den = o.num_dense or 13
  local tables = o.table_sizes or {}
  if #tables == 0 then for t = 1, 26 do tables[t] = 1000 end end
  local L, fixed = o.num_indices_per_lookup or 10, o.fixed or false
  local seed, signal = o.seed or 1, o.signal or 3
  local nt = #tables
  -- the planted weights: one per dense feature, one score per table row (drawn on first use)
  local w = {}
  do
    local r = source.sample_rng(seed, 1, 0)
    for j = 1, m_den do w[j] = r:normal() / math.sqrt(m_den) end
  end
  local score = {}
  for t = 1, nt do score[t] = {} end
  local function row_score(t, row)
    local s = score[t][row]
    if not s then
      s = source.sample_rng(seed, 2 + t, row):normal()
      score[t][row] = s
    end
    return s
  end

  local ds = {}
  function ds:size() return n end
  function ds:get(i)
    local r = source.sample_rng(seed, 0, i)   -- the sample's data: the same in every epoch
    local dense = ember.empty({ m_den })
    local logit = 0
    for j = 1, m_den do
      local u = r:random()
      dense[j] = u
      logit = logit + w[j] * (u - 0.5)
    end
    local parts = {}
    for t = 1, nt do
      local size = tables[t]
      local k = L
      if not fixed then k = math.floor(math.max(1, r:random() * math.min(size, L)) + 0.5) end
      local seen, rows = {}, {}
      for _ = 1, k do
        local row = math.floor(r:random() * (size - 1) + 0.5)   -- np.round: ties are measure zero
        if not seen[row] then
          seen[row] = true
          rows[#rows + 1] = row
        end
      end
      table.sort(rows)
      local s = 0
      for q, row in ipairs(rows) do
        s = s + row_score(t, row)
        rows[q] = row + 1
      end
      logit = logit + s / #rows / math.sqrt(nt)
      parts[t] = rows
    end
    local p = 1 / (1 + math.exp(-signal * logit))
    return { dense = dense, sparse = jagged.sample(parts), label = r:random() < p and 1 or 0 }
  end
  return ds
end
