-- LSTM layer forward + backward, char-rnn's shape by default (2 layers x 128, sequence 50,
-- batch 50, input 65): median milliseconds per step over N steps after one warm-up.
--   ember bench/seq/lstm_layer.lua [steps = 20] [T = 50] [B = 50] [H = 128] [threads]
local ember = require 'ember'
local C = require('ember.internal').C
local N, T, B, H = tonumber(arg[1] or 20), tonumber(arg[2] or 50), tonumber(arg[3] or 50), tonumber(arg[4] or 128)
if arg[5] then ember.set_num_threads(tonumber(arg[5])) end
ember.manual_seed(0)
local lstm = ember.nn.LSTM(65, H, { num_layers = 2 })
local x = ember.randn(T, B, 65)
local times = {}
for i = 0, N do
  local t0 = C.em_clock_monotonic()
  local y = lstm(x)
  y:sum():backward()
  for _, p in ipairs(lstm:parameters()) do p.grad = nil end
  if i > 0 then times[#times + 1] = (C.em_clock_monotonic() - t0) * 1e3 end
end
table.sort(times)
print(string.format('{"impl": "ember", "T": %d, "B": %d, "H": %d, "median_ms": %.2f}', T, B, H,
  times[math.ceil(#times / 2)]))
