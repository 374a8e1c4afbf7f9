-- bench/tensor/tensor_ops.lua: ember side of the tensor benchmarks, run by the ember host
--   build/ember bench/tensor/tensor_ops.lua [-t threads] [-r reps] [-w warmup] [-o op,op,...]
-- bench/tensor/run_tensor.sh runs it beside bench/tensor/torch_tensor_ops.py, round by round, and
-- compares medians. Same ops, sizes, dtypes, warm-up and timing rules on both sides:
--   add       c = a + b, two 16M-element float32 tensors, result allocated every time
--   add_out   the same into a c allocated once (the out= form)
--   add_      a += b in place
--   sum       a:sum() over 16M float32
--   softmax   x:softmax(-1), x 4096 x 4096 float32
--   matmul    a:matmul(b), 1024 x 1024 float32
-- Each op runs `warmup` untimed calls, then `reps` timed ones (clock_gettime with
-- CLOCK_MONOTONIC). A result is freed after its timing stops, so freeing is not timed
-- (PyTorch's side drops its results outside the timing too).
-- Prints one JSON line per op: {"impl":"ember","op":...,"times_ms":[...], ...}; an op the
-- library does not have yet prints {"impl":"ember","op":...,"error":"..."} instead, so the
-- script is useful while the library is being written.
local ffi = require 'ffi'
local ember = require 'ember'
local C = ember.C

local N_ELEM = 16 * 1024 * 1024        -- 16M float32 = 64 MiB per tensor
local SOFTMAX_ROWS, SOFTMAX_COLS = 4096, 4096
local MATMUL_N = 1024
local F32 = 4

-- ---------------------------------------------------------------- options
local function usage(msg)
  io.stderr:write('tensor_ops.lua: ', msg, '\n',
    'usage: ember bench/tensor/tensor_ops.lua [-t threads] [-r reps] [-w warmup] [-o op,op]\n')
  os.exit(2)
end

local opts = { threads = 2, reps = 10, warmup = 2, ops = 'add,add_out,add_,sum,softmax,matmul' }
do
  local names = { ['-t'] = 'threads', ['-r'] = 'reps', ['-w'] = 'warmup', ['-o'] = 'ops' }
  local i = 1
  while arg and arg[i] do
    local key = names[arg[i]]
    if not key or arg[i + 1] == nil then usage('unknown or incomplete option ' .. arg[i]) end
    local v = arg[i + 1]
    if key ~= 'ops' then
      v = tonumber(v)
      if not v or v < 0 or v ~= math.floor(v) or (key ~= 'warmup' and v == 0) then
        usage(arg[i] .. ' needs a positive integer, got ' .. arg[i + 1])
      end
    end
    opts[key] = v
    i = i + 2
  end
end

-- ---------------------------------------------------------------- clock
-- ember's own monotonic clock (the one its runtime times itself with).
local function now_ms() return ember.C.em_clock_monotonic() * 1e3 end

-- ---------------------------------------------------------------- helpers
local function json_string(s)
  return '"' .. tostring(s):gsub('[%c"\\]', function(ch)
    return string.format('\\u%04x', ch:byte())
  end) .. '"'
end

-- Free a result's storage now (outside the timing), as PyTorch's refcounting does when the
-- name is rebound; Lua's GC would otherwise free it at some later, timed, moment.
local free = ember.Tensor.free or function(t) C.em_tensor_free(t) end
local function drop(t)
  if ember.is_tensor(t) then free(t) end
end

local function timed(fn)
  for _ = 1, opts.warmup do drop(fn()) end
  local times = {}
  for r = 1, opts.reps do
    local t0 = now_ms()
    local out = fn()
    local t1 = now_ms()
    drop(out)
    times[r] = t1 - t0
  end
  return times
end

-- The out= and in-place spellings of add vary between versions of the API: take the first
-- one that the library has and that gives the right answer on a small case, and report it.
local out_box = ffi.new('em_tensor*[1]')
local add_forms = {
  out = {
    { 'ember.add(a, b, {out = c})', function(a, b, c) return ember.add(a, b, { out = c }) end },
    { 'a:add(b, {out = c})', function(a, b, c) return a:add(b, { out = c }) end },
    -- The C API's out convention, through the FFI, while the Lua API has no out= form.
    { 'C.em_binary(EM_ADD, {c}, a, b) (FFI: no out= form in the Lua API)', function(a, b, c)
      out_box[0] = c
      local status = C.em_binary(C.EM_ADD, out_box, a, b)
      out_box[0] = nil
      if status ~= 0 then error(ffi.string(C.em_last_error())) end
    end },
  },
  inplace = {
    { 'a:add_(b)', function(a, b) return a:add_(b) end },
    { 'a:add(b, {out = a})', function(a, b) return a:add(b, { out = a }) end },
  },
}

local item_box = ffi.new('double[1]')
local function total(t)   -- sum of a small tensor as a Lua number, without needing :item()
  local s = t:sum()
  if C.em_tensor_item(s, item_box) ~= 0 then error(ffi.string(C.em_last_error())) end
  return item_box[0]
end

local function find_add_form(kind)
  for _, cand in ipairs(add_forms[kind]) do
    local a, b, c = ember.ones(4), ember.ones(4), ember.zeros(4)
    local ok, right = pcall(function()
      cand[2](a, b, c)
      return total(kind == 'out' and c or a) == 8
    end)
    if ok and right then return cand[1], cand[2] end
  end
  return nil
end

-- ---------------------------------------------------------------- setup
if ember.set_num_threads then ember.set_num_threads(opts.threads) else C.em_set_num_threads(opts.threads) end
local threads = tonumber(C.em_get_num_threads())
if ember.manual_seed then ember.manual_seed(0) end

local ok_init, init_err = pcall(function()
  return ember.randn(1)
end)
if not ok_init then
  io.stderr:write('tensor_ops.lua: ember.randn is not available yet: ', tostring(init_err), '\n')
  os.exit(3)
end

local a = ember.randn(N_ELEM)
local b = ember.randn(N_ELEM)
local c = ember.empty(N_ELEM)
local x = ember.randn(SOFTMAX_ROWS, SOFTMAX_COLS)
local ma = ember.randn(MATMUL_N, MATMUL_N)
local mb = ember.randn(MATMUL_N, MATMUL_N)

local nbytes = N_ELEM * F32
-- op -> { bytes moved as STREAM counts them, flops, a function that makes the call, spelling }
local ops = {
  add = { 3 * nbytes, N_ELEM, function() return a + b end, 'a + b' },
  add_out = { 3 * nbytes, N_ELEM, 'out' },
  add_ = { 3 * nbytes, N_ELEM, 'inplace' },
  sum = { nbytes, N_ELEM, function() return a:sum() end, 'a:sum()' },
  softmax = { 2 * SOFTMAX_ROWS * SOFTMAX_COLS * F32, 0, function() return x:softmax(-1) end, 'x:softmax(-1)' },
  matmul = { 0, 2 * MATMUL_N ^ 3, function() return ma:matmul(mb) end, 'a:matmul(b)' },
}

-- ---------------------------------------------------------------- run
for name in opts.ops:gmatch('[^,]+') do
  local spec = ops[name]
  if not spec then usage('unknown op ' .. name) end
  local fn, spelling, err = spec[3], spec[4], nil
  if fn == 'out' or fn == 'inplace' then
    local kind = fn
    local form, call = find_add_form(kind)
    if form then
      -- returns nothing: the result is c or a, which must not be freed
      spelling, fn = form, function() call(a, b, c) end
    else
      err = 'no ' .. (kind == 'out' and 'out=' or 'in-place') .. ' form of add found in the Lua API'
    end
  end
  local ok, result = true, nil
  if not err then ok, result = pcall(timed, fn) end
  if err or not ok then
    print(string.format('{"impl":"ember","op":%s,"threads":%d,"error":%s}',
      json_string(name), threads, json_string(err or result)))
  else
    local parts = {}
    for i, t in ipairs(result) do parts[i] = string.format('%.4f', t) end
    print(string.format('{"impl":"ember","op":%s,"threads":%d,"bytes":%.0f,"flops":%.0f,' ..
      '"call":%s,"version":%s,"times_ms":[%s]}', json_string(name), threads, spec[1], spec[2],
      json_string(spelling), json_string(ember._VERSION), table.concat(parts, ',')))
  end
  io.stdout:flush()
end
