-- ember.nn recurrent layers: RNN, LSTM, GRU and their cells, after torch.nn.
--
-- Parameters have PyTorch's names, shapes and initialisation, so state dicts move both
-- ways: weight_ih_l<k> [G*H, I] (layer 0) or [G*H, D*H] (above), weight_hh_l<k> [G*H, H],
-- bias_ih_l<k>, bias_hh_l<k> [G*H] (suffix _reverse for the second direction), each
-- U(-1/sqrt(H), 1/sqrt(H)); G = 4 for the LSTM (gates i, f, g, o), 3 for the GRU (r, z, n),
-- 1 for the RNN. Each layer and direction is one C call (em_nn_rnn) whose time loop, and
-- backward, run in C (on cuda: one cuDNN RNN each, runtime/plugins/cuda/rnn.cu).
--
--   local lstm = nn.LSTM(10, 20, {num_layers = 2, batch_first = true, dropout = 0.1})
--   local y, state = lstm(x)                     -- x [B, T, 10] -> y [B, T, 20]
--   local h_n, c_n = state[1], state[2]          -- each [2, B, 20]
--   local y2 = lstm(x, {h0, c0}, lengths)        -- lengths: {5, 3, ...} or an int64 tensor
--
-- With lengths, outputs past a sequence's length are zero and its final state is the one
-- after its last valid step (as with PyTorch's pack_padded_sequence).
local ember = require 'ember'
local nn = setmetatable({}, { __index = require 'ember.nn.module' })
local I = require 'ember.internal'
local C = I.C
local throw, describe, is_tensor = I.throw, I.describe, I.is_tensor
local Module, init = nn.Module, require 'ember.nn.initializers'
local F = require 'ember.nn.functional'

local MODES = { RNN_TANH = C.EM_RNN_TANH, RNN_RELU = C.EM_RNN_RELU, LSTM = C.EM_RNN_LSTM, GRU = C.EM_RNN_GRU }
local GATES = { RNN_TANH = 1, RNN_RELU = 1, LSTM = 4, GRU = 3 }

local function need_size(cls, what, v, min)
  if type(v) ~= 'number' or v ~= math.floor(v) or v < (min or 1) then
    throw(string.format('%s: %s must be an integer >= %d, got %s', cls, what, min or 1,
      type(v) == 'number' and tostring(v) or describe(v)))
  end
  return v
end

-- lengths as an int64 CPU tensor (a Lua list of numbers or a tensor), or nil.
local function lengths_tensor(cls, lengths)
  if lengths == nil or is_tensor(lengths) then return lengths end
  if type(lengths) == 'table' then return ember.tensor(lengths, { dtype = 'int64' }) end
  throw(string.format('%s: lengths must be a tensor or a list of numbers, got %s', cls, describe(lengths)))
end

-- One layer in one direction: y [T, B, H] and the state [S, B, H] (em_nn_rnn).
local function run_layer(mode, x, h0, c0, w_ih, w_hh, b_ih, b_hh, lengths, reverse)
  return I.new_pair(C.em_nn_rnn(I.box, I.box2, mode, x, h0, c0, w_ih, w_hh, b_ih, b_hh, lengths, reverse and 1 or 0))
end

-- ---------------------------------------------------------------- RNN, LSTM, GRU
local RNNBase = Module:extend('RNNBase')
nn.RNNBase = RNNBase

local BASE_OPTS = { 'num_layers', 'bias', 'batch_first', 'dropout', 'bidirectional', 'dtype', 'device' }

function RNNBase:_setup(cls, mode, input_size, hidden_size, opts, allowed)
  need_size(cls, 'input_size', input_size)
  need_size(cls, 'hidden_size', hidden_size)
  I.check_opts(cls, opts, I.option_set(unpack(allowed)), 3)
  opts = opts or {}
  self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
  self.num_layers = need_size(cls, 'num_layers', opts.num_layers or 1)
  self.bias = opts.bias ~= false
  self.batch_first = opts.batch_first == true
  self.bidirectional = opts.bidirectional == true
  self.dropout = opts.dropout or 0
  if type(self.dropout) ~= 'number' or self.dropout < 0 or self.dropout > 1 then
    throw(string.format('%s: dropout must be a probability in [0, 1], got %s', cls, tostring(self.dropout)))
  end
  local G, D = GATES[mode], self.bidirectional and 2 or 1
  local to = { dtype = opts.dtype, device = opts.device }
  self._names = {}
  for l = 0, self.num_layers - 1 do
    for d = 0, D - 1 do
      local sfx = 'l' .. l .. (d == 1 and '_reverse' or '')
      local n_in = l == 0 and input_size or D * hidden_size
      local names = { 'weight_ih_' .. sfx, 'weight_hh_' .. sfx }
      self[names[1]] = nn.Parameter(ember.empty(G * hidden_size, n_in, to))
      self[names[2]] = nn.Parameter(ember.empty(G * hidden_size, hidden_size, to))
      if self.bias then
        names[3], names[4] = 'bias_ih_' .. sfx, 'bias_hh_' .. sfx
        self[names[3]] = nn.Parameter(ember.empty(G * hidden_size, to))
        self[names[4]] = nn.Parameter(ember.empty(G * hidden_size, to))
      end
      self._names[#self._names + 1] = names
    end
  end
  self:reset_parameters()
end

function RNNBase:reset_parameters()
  local bound = 1 / math.sqrt(self.hidden_size)
  for _, p in ipairs(self:parameters()) do init.uniform_(p, -bound, bound) end
end

function RNNBase:extra_repr()
  local s = string.format('%d, %d', self.input_size, self.hidden_size)
  if self.num_layers ~= 1 then s = s .. ', num_layers=' .. self.num_layers end
  if self.mode == 'RNN_RELU' then s = s .. ", nonlinearity='relu'" end
  if not self.bias then s = s .. ', bias=false' end
  if self.batch_first then s = s .. ', batch_first=true' end
  if self.dropout ~= 0 then s = s .. ', dropout=' .. self.dropout end
  if self.bidirectional then s = s .. ', bidirectional=true' end
  return s
end

-- The initial states as [L*D, B, H] tensors (nil: zeros); LSTM's hx is {h0, c0}.
local function split_hx(self, hx)
  if hx == nil then return nil, nil end
  if self.mode == 'LSTM' then
    if type(hx) ~= 'table' or is_tensor(hx) or not is_tensor(hx[1]) or not is_tensor(hx[2]) then
      throw('LSTM: the initial state must be a pair {h0, c0} of tensors, got ' .. describe(hx))
    end
    return hx[1], hx[2]
  end
  if not is_tensor(hx) then throw(self.__name .. ': the initial state h0 must be a tensor, got ' .. describe(hx)) end
  return hx, nil
end

local function check_state_shape(self, what, t, L, B, H, batched)
  local want = batched and { L, B, H } or { L, H }
  local ok = #t.shape == #want
  for i = 1, #want do ok = ok and t.shape[i] == want[i] end
  if not ok then
    throw(string.format('%s: expected %s of shape [%s] (num_layers * num_directions, %sbatch, hidden_size), got [%s]',
      self.__name, what, table.concat(want, ', '), batched and '' or 'no ', table.concat(t.shape, ', ')))
  end
end

-- forward(input [, hx [, lengths]]): input [T, B, I] ([B, T, I] with batch_first) or
-- unbatched [T, I]. Returns output [T, B, D*H] and h_n [L*D, B, H] ({h_n, c_n} for the LSTM).
function RNNBase:forward(x, hx, lengths)
  local cls = self.__name
  if not is_tensor(x) then throw(cls .. ': expected an input tensor, got ' .. describe(x)) end
  local nd = #x.shape
  if nd ~= 2 and nd ~= 3 then
    throw(string.format('%s: expected the input to be 3-d [%s] or 2-d [seq_len, input_size], got [%s]', cls,
      self.batch_first and 'batch, seq_len, input_size' or 'seq_len, batch, input_size', table.concat(x.shape, ', ')))
  end
  if x.shape[nd] ~= self.input_size then
    throw(string.format('%s: expected the input'.."'".."s last dim to be input_size = %d, got [%s]", cls,
      self.input_size, table.concat(x.shape, ', ')))
  end
  local batched = nd == 3
  if not batched then x = x:unsqueeze(2)
  elseif self.batch_first then x = x:transpose(1, 2) end
  local B, H, D = x.shape[2], self.hidden_size, self.bidirectional and 2 or 1
  local h0, c0 = split_hx(self, hx)
  if h0 then check_state_shape(self, 'h0', h0, self.num_layers * D, B, H, batched) end
  if c0 then check_state_shape(self, 'c0', c0, self.num_layers * D, B, H, batched) end
  if not batched then
    h0 = h0 and h0:unsqueeze(2)
    c0 = c0 and c0:unsqueeze(2)
  end
  lengths = lengths_tensor(cls, lengths)
  local mode, layer_in = MODES[self.mode], x
  local hs, cs = {}, {}
  for l = 0, self.num_layers - 1 do
    local outs = {}
    for d = 0, D - 1 do
      local k = l * D + d
      local n = self._names[k + 1]
      local y, st = run_layer(mode, layer_in, h0 and h0:select(1, k + 1), c0 and c0:select(1, k + 1), self[n[1]],
        self[n[2]], n[3] and self[n[3]], n[4] and self[n[4]], lengths, d == 1)
      outs[d + 1] = y
      hs[k + 1] = st:select(1, 1)
      if self.mode == 'LSTM' then cs[k + 1] = st:select(1, 2) end
    end
    layer_in = D == 2 and ember.cat(outs, 3) or outs[1]
    if self.dropout > 0 and l < self.num_layers - 1 then layer_in = F.dropout(layer_in, self.dropout, self.training) end
  end
  local out, h_n = layer_in, ember.stack(hs, 1)
  local c_n = self.mode == 'LSTM' and ember.stack(cs, 1) or nil
  if not batched then
    out, h_n, c_n = out:squeeze(2), h_n:squeeze(2), c_n and c_n:squeeze(2)
  elseif self.batch_first then
    out = out:transpose(1, 2)
  end
  if self.mode == 'LSTM' then return out, { h_n, c_n } end
  return out, h_n
end

-- RNN(input_size, hidden_size [, {num_layers = 1, nonlinearity = 'tanh', bias = true,
-- batch_first = false, dropout = 0, bidirectional = false, dtype, device}])
local RNN = RNNBase:extend('RNN')
nn.RNN = RNN
function RNN:init(input_size, hidden_size, opts)
  local nl = opts and opts.nonlinearity or 'tanh'
  if nl ~= 'tanh' and nl ~= 'relu' then
    throw("RNN: nonlinearity must be 'tanh' or 'relu', got " .. (type(nl) == 'string' and ("'" .. nl .. "'") or
      describe(nl)))
  end
  local allowed = { 'nonlinearity', unpack(BASE_OPTS) }
  self:_setup('RNN', nl == 'tanh' and 'RNN_TANH' or 'RNN_RELU', input_size, hidden_size, opts, allowed)
end

-- LSTM(input_size, hidden_size [, options as RNN's, without nonlinearity])
local LSTM = RNNBase:extend('LSTM')
nn.LSTM = LSTM
function LSTM:init(input_size, hidden_size, opts)
  self:_setup('LSTM', 'LSTM', input_size, hidden_size, opts, BASE_OPTS)
end

-- GRU(input_size, hidden_size [, options as LSTM's])
local GRU = RNNBase:extend('GRU')
nn.GRU = GRU
function GRU:init(input_size, hidden_size, opts)
  self:_setup('GRU', 'GRU', input_size, hidden_size, opts, BASE_OPTS)
end

-- ---------------------------------------------------------------- cells
-- RNNCell / LSTMCell / GRUCell(input_size, hidden_size [, {bias = true, dtype, device}]
-- (RNNCell also nonlinearity)): one step. x [B, I] or [I]; the state [B, H] (nil: zeros).
--   h = rnn_cell(x, h);  h, c = lstm_cell(x, {h, c});  h = gru_cell(x, h)
-- Each is one call of the layer kernel over a sequence of one step.
local CellBase = Module:extend('RNNCellBase')
nn.RNNCellBase = CellBase

function CellBase:_setup(cls, mode, input_size, hidden_size, opts, allowed)
  need_size(cls, 'input_size', input_size)
  need_size(cls, 'hidden_size', hidden_size)
  I.check_opts(cls, opts, I.option_set(unpack(allowed)), 3)
  opts = opts or {}
  self.mode, self.input_size, self.hidden_size, self.bias = mode, input_size, hidden_size, opts.bias ~= false
  local G, to = GATES[mode], { dtype = opts.dtype, device = opts.device }
  self.weight_ih = nn.Parameter(ember.empty(G * hidden_size, input_size, to))
  self.weight_hh = nn.Parameter(ember.empty(G * hidden_size, hidden_size, to))
  if self.bias then
    self.bias_ih = nn.Parameter(ember.empty(G * hidden_size, to))
    self.bias_hh = nn.Parameter(ember.empty(G * hidden_size, to))
  end
  RNNBase.reset_parameters(self)
end

function CellBase:extra_repr() return string.format('%d, %d', self.input_size, self.hidden_size) end

local function cell_state(self, t, what, B, batched)
  if t == nil then return nil end
  if not is_tensor(t) then throw(string.format('%s: %s must be a tensor, got %s', self.__name, what, describe(t))) end
  local ok = batched and #t.shape == 2 and t.shape[1] == B and t.shape[2] == self.hidden_size or
      (not batched and #t.shape == 1 and t.shape[1] == self.hidden_size)
  if not ok then
    throw(string.format('%s: expected %s of shape [%s], got [%s]', self.__name, what,
      batched and (B .. ', ' .. self.hidden_size) or tostring(self.hidden_size), table.concat(t.shape, ', ')))
  end
  return batched and t or t:unsqueeze(1)
end

function CellBase:forward(x, hx)
  local cls = self.__name
  if not is_tensor(x) then throw(cls .. ': expected an input tensor, got ' .. describe(x)) end
  local nd = #x.shape
  if (nd ~= 1 and nd ~= 2) or x.shape[nd] ~= self.input_size then
    throw(string.format('%s: expected the input of shape [batch, %d] or [%d], got [%s]', cls, self.input_size,
      self.input_size, table.concat(x.shape, ', ')))
  end
  local batched = nd == 2
  if not batched then x = x:unsqueeze(1) end
  local B = x.shape[1]
  local h, c
  if self.mode == 'LSTM' then
    if hx ~= nil and (type(hx) ~= 'table' or is_tensor(hx)) then
      throw('LSTMCell: the state must be a pair {h, c} of tensors, got ' .. describe(hx))
    end
    h = cell_state(self, hx and hx[1], 'h', B, batched)
    c = cell_state(self, hx and hx[2], 'c', B, batched)
  else
    h = cell_state(self, hx, 'h', B, batched)
  end
  local _, st = run_layer(MODES[self.mode], x:unsqueeze(1), h, c, self.weight_ih, self.weight_hh, self.bias_ih,
    self.bias_hh, nil, false)
  local h1 = st:select(1, 1)
  local c1 = self.mode == 'LSTM' and st:select(1, 2) or nil
  if not batched then h1, c1 = h1:squeeze(1), c1 and c1:squeeze(1) end
  return h1, c1
end

local RNNCell = CellBase:extend('RNNCell')
nn.RNNCell = RNNCell
function RNNCell:init(input_size, hidden_size, opts)
  local nl = opts and opts.nonlinearity or 'tanh'
  if nl ~= 'tanh' and nl ~= 'relu' then
    throw("RNNCell: nonlinearity must be 'tanh' or 'relu', got " .. tostring(nl))
  end
  self:_setup('RNNCell', nl == 'tanh' and 'RNN_TANH' or 'RNN_RELU', input_size, hidden_size, opts,
    { 'bias', 'nonlinearity', 'dtype', 'device' })
end

local LSTMCell = CellBase:extend('LSTMCell')
nn.LSTMCell = LSTMCell
function LSTMCell:init(input_size, hidden_size, opts)
  self:_setup('LSTMCell', 'LSTM', input_size, hidden_size, opts, { 'bias', 'dtype', 'device' })
end

local GRUCell = CellBase:extend('GRUCell')
nn.GRUCell = GRUCell
function GRUCell:init(input_size, hidden_size, opts)
  self:_setup('GRUCell', 'GRU', input_size, hidden_size, opts, { 'bias', 'dtype', 'device' })
end

return nn
