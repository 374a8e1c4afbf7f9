-- The ember half of tests/interop/seq_state_dict.py: an LSTM and a GPT block (pre-norm
-- TransformerEncoderLayer, GELU, causal attention) move between ember and PyTorch through
-- safetensors state dicts with the same outputs.
--   ember seq_state_dict.lua write DIR   ember initialises both modules, saves their state
--                                        dicts, an input and ember's outputs (ember_*.safetensors)
--   ember seq_state_dict.lua check DIR   loads PyTorch's files (torch_*.safetensors: the state
--                                        dict, the input, PyTorch's outputs) into ember's
--                                        modules and prints the largest difference of each output
local ember = require 'ember'
local nn = ember.nn
local mode, dir = arg[1], arg[2]

local function lstm() return nn.LSTM(8, 16, { num_layers = 2, batch_first = true, dtype = 'float64' }) end
local function block()
  return nn.TransformerEncoderLayer(32, 4, { dim_feedforward = 128, dropout = 0, activation = 'gelu',
    batch_first = true, norm_first = true, dtype = 'float64' })
end
local function run_lstm(m, x)
  local y, st = m(x)
  return { y = y, h = st[1], c = st[2] }
end
local function run_block(m, x) return { y = m(x, { is_causal = true }) } end

local cases = { lstm = { make = lstm, run = run_lstm, x = { 3, 5, 8 } }, block = { make = block, run = run_block,
  x = { 2, 7, 32 } } }

for _, name in ipairs { 'lstm', 'block' } do
  local case = cases[name]
  if mode == 'write' then
    ember.manual_seed(name == 'lstm' and 1 or 2)
    local m = case.make()
    m:eval()
    local x = ember.randn(case.x, { dtype = 'float64' })
    ember.save(dir .. '/ember_' .. name .. '.safetensors', m:state_dict())
    local io_t = case.run(m, x)
    io_t.x = x
    ember.save(dir .. '/ember_' .. name .. '_io.safetensors', io_t)
  else
    local m = case.make()
    m:eval()
    local sd = ember.load(dir .. '/torch_' .. name .. '.safetensors')
    m:load_state_dict(sd)
    local io_t = ember.load(dir .. '/torch_' .. name .. '_io.safetensors')
    local out = case.run(m, io_t.x)
    for _, k in ipairs { 'y', 'h', 'c' } do
      if out[k] then print(string.format('%s %s %.3e', name, k, (out[k] - io_t[k]):abs():max():item())) end
    end
  end
end
