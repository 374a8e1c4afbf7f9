-- ember.autograd: gradients from Lua over runtime/autograd (ember/autograd.h).
--
--   local w = ember.randn(3, 2):requires_grad_()
--   local loss = (x:matmul(w)):relu():sum()
--   loss:backward()                       -- w.grad now holds d loss / d w
--   ember.no_grad(function() w:sub_(w.grad * 0.1) end)
--
-- Tensor fields: t.requires_grad (assignable on leaves), t.grad (nil when none; assignable,
-- nil clears it), t.grad_fn (the name of the node that made t, nil for leaves).
-- Tensor methods: requires_grad_([flag]), is_leaf(), backward([grad] [, {retain_graph =}]),
-- detach(), retain_grad(), register_post_accumulate_grad_hook(fn) (= autograd.add_leaf_hook).
-- Module functions: ember.no_grad(fn, ...), ember.enable_grad(fn, ...),
-- ember.set_grad_enabled(flag), ember.is_grad_enabled(), ember.autograd.Function{...},
-- ember.autograd.add_leaf_hook(t, fn), ember.autograd.backward(t, grad, opts).
--
-- Every differentiable Tensor method records on the tape: the tensor library calls the
-- em_ag_* forms of the runtime's ops, which cost nothing when no input requires grad.
--
-- Where the tensor library (lua/ember/tensor/) meets autograd:
--   tensor/core.lua    I.recording(a, b), I.check_inplace(op, t, src) (the runtime's
--                      em_check_inplace under the Lua name), I.no_backward(op, t)
--   tensor/math.lua    em_binary/_scalar, em_unary, em_where, em_clamp, em_reduce, em_var,
--                      em_norm, em_cumsum, em_softmax, em_matmul, em_addmm -> em_ag_*;
--                      add/sub with alpha; mm/bmm/mv/dot/outer -> em_ag_mm ... (the runtime
--                      checks their ranks and records them as matmul); in-place forms are
--                      refused by the runtime while recording; cumprod refuses inputs that
--                      need a gradient (no backward yet)
--   tensor/shape.lua   views (view, reshape, narrow, select, transpose, permute, expand,
--                      squeeze, unsqueeze, flatten, contiguous), to/float/..., cat, stack,
--                      t[{...}], split/chunk/unbind -> em_ag_*; clone records as t * 1;
--                      copy_ and t[{...}] = v check in-place; as_strided refuses
--   tensor/index.lua   index_select, gather -> em_ag_*; masked_fill (out of place) through
--                      em_ag_masked_fill; masked_select records as an index_select; the
--                      in-place scatter/index_add/index_fill/masked_fill check in-place
--   tensor/create.lua  fill_, zero_, uniform_, normal_, random_, bernoulli_ check in-place
--   tensor/math.lua    sort/topk -> em_ag_sort/em_ag_topk, max/min(dim) -> em_ag_reduce with
--                      indices: the gradient goes back to the chosen positions
--   tensor/ops.lua     built from recorded ops (where, cat, index_select); unique and
--                      bincount's weights refuse inputs that need a gradient
-- Not recorded (their results carry no gradient): positions (the indices of sort, topk,
-- max; nonzero, argmax/argmin), comparisons, any/all.
--
-- Lua code runs inside the runtime at three places: a custom Function's backward, its
-- release (when the runtime drops the node) and leaf hooks. They go through three FFI
-- callbacks made once; the per-call state sits in a Lua table keyed by the integer passed
-- as the C context. LuaJIT forbids entering a callback from a C call that JIT-compiled
-- code made, so every function here whose C call can reach one (backward, setting .grad,
-- Function application) is excluded from compilation with jit.off; GC finalizers, the
-- other path to a release, never run on a trace.
local ffi = require 'ffi'

local M = {}   -- init.lua puts these in ember
local I = require 'ember.tensor.core'
local create = require 'ember.tensor.create'
local C, Tensor = I.C, I.Tensor
local throw, check, wrap, describe = I.throw, I.check, I.wrap, I.describe
local is_tensor, arg_error, check_opts, option_set = I.is_tensor, I.arg_error, I.check_opts, I.option_set
local box = I.box
local properties, setters = I.properties, I.setters

local autograd = {}
M.autograd = autograd

-- ---------------------------------------------------------------- grad mode
function M.is_grad_enabled() return C.em_grad_enabled() ~= 0 end
function M.set_grad_enabled(flag) C.em_set_grad_enabled(flag and 1 or 0) end

local unpack = unpack or table.unpack
local function pack(...) return { n = select('#', ...), ... } end

-- Runs fn(...) with grad mode set to `enabled`, restoring the previous mode after it
-- returns or raises; returns fn's results.
local function with_grad_mode(op, enabled, fn, ...)
  if type(fn) ~= 'function' then arg_error(op, 1, 'a function', fn) end
  local prev = C.em_grad_enabled()
  C.em_set_grad_enabled(enabled)
  local r = pack(pcall(fn, ...))
  C.em_set_grad_enabled(prev)
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2, r.n)
end
function M.no_grad(fn, ...) return with_grad_mode('no_grad', 0, fn, ...) end
function M.enable_grad(fn, ...) return with_grad_mode('enable_grad', 1, fn, ...) end

-- ---------------------------------------------------------------- fields
properties.requires_grad = function(t) return C.em_requires_grad(t) ~= 0 end
properties.grad = function(t)
  local g = C.em_grad(t)
  if g == nil then
    local sg = C.em_grad_sparse(t)   -- a row-sparse gradient (ember/sparse.lua) or none
    if sg ~= nil then return I.own_sparse_grad(sg) end
    return nil
  end
  return wrap(g)
end
properties.grad_fn = function(t)
  local name = C.em_grad_fn_name(t)
  if name == nil then return nil end
  return ffi.string(name)
end

local function set_grad(t, g)
  if g ~= nil and not is_tensor(g) then
    if type(g) == 'cdata' and I.is_sparse_grad and I.is_sparse_grad(g) then return check(C.em_set_grad_sparse(t, g)) end
    throw('grad: expected a tensor, a SparseGrad or nil to assign to .grad, got ' .. describe(g))
  end
  check(C.em_set_grad(t, g))
end
jit.off(set_grad)   -- dropping the old .grad may release a graph with a custom Function
setters.grad = set_grad
setters.requires_grad = function(t, flag) check(C.em_requires_grad_(t, flag and 1 or 0)) end

-- requires_grad_([flag = true]): marks a leaf as needing gradients; returns t.
function Tensor.requires_grad_(t, flag)
  if flag ~= nil and type(flag) ~= 'boolean' then arg_error('requires_grad_', 1, 'a boolean or nil', flag) end
  check(C.em_requires_grad_(t, flag == false and 0 or 1))
  return t
end
-- is_leaf(): true for tensors not made by a recorded op (parameters, inputs, detached).
function Tensor.is_leaf(t) return C.em_is_leaf(t) ~= 0 end
-- detach(): a tensor sharing t's storage, with no history and no requires_grad.
function Tensor.detach(t) return I.new_view(C.em_detach(box, t), t) end
-- retain_grad(): keep .grad on a non-leaf after backward.
function Tensor.retain_grad(t)
  check(C.em_retain_grad(t))
  return t
end

-- ---------------------------------------------------------------- errors from Lua callbacks
-- A Lua error inside a callback cannot unwind through the runtime's C frames; it is
-- caught, handed to the runtime as an error status (custom backward) or kept here (hooks,
-- which return nothing), and raised once em_backward returns.
local pending_error = nil

local function set_c_error(msg)
  C.em_set_error(C.EM_ERR_RUNTIME, '%s', msg)
end

-- ---------------------------------------------------------------- backward
local BACKWARD_OPTS = option_set('retain_graph')
-- backward([grad] [, {retain_graph = false}]): gradients of t into the leaves' .grad.
-- grad may be omitted for one-element t.
local function backward(t, grad, opts)
  if type(grad) == 'table' and opts == nil then grad, opts = nil, grad end
  if grad ~= nil and not is_tensor(grad) then arg_error('backward', 1, 'a tensor (the gradient) or nil', grad) end
  check_opts('backward', opts, BACKWARD_OPTS, 2)
  local retain = opts and opts.retain_graph and 1 or 0
  pending_error = nil
  local status = C.em_backward(t, grad, retain)
  local hook_error = pending_error
  pending_error = nil
  I.check(status)
  if hook_error then throw(hook_error) end
end
jit.off(backward)
Tensor.backward = backward
function autograd.backward(t, grad, opts)
  if not is_tensor(t) then arg_error('backward', 1, 'a tensor', t) end
  return backward(t, grad, opts)
end

-- ---------------------------------------------------------------- leaf hooks
-- add_leaf_hook(t, fn): fn(t) runs once t's gradient for a backward pass is complete
-- (t.grad holds it). Returns a handle whose remove() unregisters the hook. The hook keeps
-- fn (and what it captures) alive until removed.
local hooks = {}         -- id (number) -> fn
local hook_ids = 0
local hook_cb = ffi.cast('em_leaf_hook', function(leaf, ctx)
  local fn = hooks[tonumber(ffi.cast('intptr_t', ctx))]
  if not fn or pending_error then return end
  C.em_tensor_retain(leaf)
  local ok, err = pcall(fn, wrap(leaf))
  if not ok then pending_error = 'leaf hook: ' .. tostring(err) end
end)
autograd._hook_cb = hook_cb   -- anchored: the callback must live as long as the module

local Handle = {}
Handle.__index = Handle
function Handle:remove()
  if self.id == nil then return end
  check(C.em_remove_leaf_hook(self.tensor, self.c_id))
  hooks[self.id] = nil
  self.id = nil
end

function autograd.add_leaf_hook(t, fn)
  if not is_tensor(t) then arg_error('add_leaf_hook', 1, 'a tensor', t) end
  if type(fn) ~= 'function' then arg_error('add_leaf_hook', 2, 'a function', fn) end
  hook_ids = hook_ids + 1
  local id = hook_ids
  local c_id = C.em_add_leaf_hook(t, hook_cb, ffi.cast('void *', id))
  if c_id <= 0 then I.raise() end
  hooks[id] = fn
  return setmetatable({ id = id, c_id = c_id, tensor = t }, Handle)
end
-- PyTorch's name for the same kind of hook.
Tensor.register_post_accumulate_grad_hook = autograd.add_leaf_hook

-- ---------------------------------------------------------------- custom functions
-- local Square = ember.autograd.Function{
--   name = 'SquareBackward',                       -- optional: the grad_fn name
--   forward = function(ctx, x) ctx:save_for_backward(x); return x * x end,
--   backward = function(ctx, grad) local x = ctx.saved_tensors[1]; return grad * 2 * x end,
-- }
-- local y = Square(x)          (or Square:apply(x))
--
-- forward runs without recording and may take any arguments and return one or more
-- tensors. backward receives one gradient per output (zeros when an output got none)
-- and returns one value per forward argument: a gradient tensor of that argument's
-- shape, or nil (for non-tensors, or no gradient). Tensors kept for backward go through
-- ctx:save_for_backward(...) (read back as ctx.saved_tensors); other ctx fields may
-- hold plain values (tensors stored on ctx are detached, so no reference cycle keeps
-- the graph alive). An error raised in backward comes back as an error from
-- loss:backward() naming the function.
local Ctx = {}
Ctx.__index = Ctx
Ctx.__newindex = function(ctx, k, v)
  if is_tensor(v) then v = v:detach() end
  rawset(ctx, k, v)
end
function Ctx:save_for_backward(...)
  local saved = {}
  for i = 1, select('#', ...) do
    local v = select(i, ...)
    if v ~= nil and not is_tensor(v) then
      throw(string.format('save_for_backward: expected tensors (or nil), got %s at position %d', describe(v), i))
    end
    saved[i] = v and v:detach()
  end
  rawset(self, 'saved_tensors', saved)
end

local calls = {}        -- id -> { fn = Function, ctx = ctx, arg_pos = {...}, outputs = {{shape, dtype}} }
local call_ids = 0

local function run_backward(entry, n_out, grad_outputs, n_in, grad_inputs)
  local grads = {}
  for j = 0, n_out - 1 do
    local g = grad_outputs[j]
    if g ~= nil then
      C.em_tensor_retain(g)
      grads[j + 1] = wrap(g)
    else
      local o = entry.outputs[j + 1]
      grads[j + 1] = create.zeros(o.shape, { dtype = o.dtype, device = o.device })
    end
  end
  local results = pack(entry.fn.backward(entry.ctx, unpack(grads, 1, n_out)))
  for i = 1, n_in do
    local pos = entry.arg_pos[i]
    local g = results[pos]
    if g ~= nil then
      if not is_tensor(g) then
        error(string.format('backward returned %s for argument %d, expected a tensor or nil', describe(g), pos), 0)
      end
      C.em_tensor_retain(g)   -- the runtime takes this reference
      grad_inputs[i - 1] = g
    end
  end
end

local backward_cb = ffi.cast('em_custom_backward', function(ctx, n_out, grad_outputs, n_in, grad_inputs)
  local entry = calls[tonumber(ffi.cast('intptr_t', ctx))]
  if not entry then
    set_c_error('custom function: its state was already released')
    return C.EM_ERR_RUNTIME
  end
  local prev = C.em_grad_enabled()
  C.em_set_grad_enabled(0)
  local ok, err = pcall(run_backward, entry, n_out, grad_outputs, n_in, grad_inputs)
  C.em_set_grad_enabled(prev)
  if ok then return C.EM_OK end
  for i = 0, n_in - 1 do   -- hand back nothing half-made
    if grad_inputs[i] ~= nil then
      C.em_tensor_release(grad_inputs[i])
      grad_inputs[i] = nil
    end
  end
  set_c_error(tostring(err))
  return C.EM_ERR_RUNTIME
end)
local release_cb = ffi.cast('em_custom_release', function(ctx)
  calls[tonumber(ffi.cast('intptr_t', ctx))] = nil
end)
autograd._backward_cb, autograd._release_cb = backward_cb, release_cb

-- How many custom-function records are alive (for tests of their release).
function autograd._live_functions()
  local n = 0
  for _ in pairs(calls) do n = n + 1 end
  return n
end

local Function = {}
Function.__index = Function

local function apply(fn, ...)
  local ctx = setmetatable({}, Ctx)
  local nargs = select('#', ...)
  local inputs, arg_pos = {}, {}
  for i = 1, nargs do
    local v = select(i, ...)
    if is_tensor(v) then
      inputs[#inputs + 1] = v
      arg_pos[#inputs] = i
    end
  end
  local outs = pack(with_grad_mode(fn.name, 0, fn.forward, ctx, ...))
  if outs.n == 0 then throw(fn.name .. ': forward returned nothing, expected one or more tensors') end
  for j = 1, outs.n do
    local o = outs[j]
    if not is_tensor(o) then
      throw(string.format('%s: forward returned %s as result %d, expected tensors', fn.name, describe(o), j))
    end
    -- An output must be a fresh handle without history: an input returned as it is (or
    -- any tensor that requires grad) becomes an alias, so the input keeps its own record.
    for k = 1, #inputs do
      if o == inputs[k] then o = o:detach(); break end
    end
    if C.em_requires_grad(o) ~= 0 then o = o:detach() end
    outs[j] = o
  end
  local any = false
  if C.em_grad_enabled() ~= 0 then
    for k = 1, #inputs do
      if C.em_requires_grad(inputs[k]) ~= 0 then any = true; break end
    end
  end
  if not any then return unpack(outs, 1, outs.n) end
  call_ids = call_ids + 1
  local id = call_ids
  local meta = {}
  for j = 1, outs.n do
    local o = outs[j]
    meta[j] = { shape = o.shape, dtype = o.dtype, device = o.device }
  end
  calls[id] = { fn = fn, ctx = ctx, arg_pos = arg_pos, outputs = meta }
  local cin = ffi.new('em_tensor *[?]', #inputs + 1)
  for k = 1, #inputs do cin[k - 1] = inputs[k] end
  local cout = ffi.new('em_tensor *[?]', outs.n + 1)
  for j = 1, outs.n do cout[j - 1] = outs[j] end
  -- On failure em_ag_custom has already called release (which dropped calls[id]).
  check(C.em_ag_custom(#inputs, cin, outs.n, cout, backward_cb, release_cb, ffi.cast('void *', id), fn.c_name))
  return unpack(outs, 1, outs.n)
end
jit.off(apply)

function Function:apply(...) return apply(self, ...) end
Function.__call = apply

local FUNCTION_FIELDS = option_set('forward', 'backward', 'name')
local c_names = {}
function autograd.Function(spec)
  if type(spec) ~= 'table' then arg_error('Function', 1, 'a table {forward = fn, backward = fn}', spec) end
  check_opts('Function', spec, FUNCTION_FIELDS, 1)
  if type(spec.forward) ~= 'function' then throw('Function: forward must be a function(ctx, ...)') end
  if type(spec.backward) ~= 'function' then throw('Function: backward must be a function(ctx, grad...)') end
  if spec.name ~= nil and type(spec.name) ~= 'string' then throw('Function: name must be a string') end
  local name = spec.name or 'CustomFunctionBackward'
  -- The runtime keeps the name pointer in its nodes, which may outlive this object:
  -- names are interned for the life of the process.
  local c_name = c_names[name]
  if not c_name then
    c_name = ffi.new('char[?]', #name + 1, name)
    c_names[name] = c_name
  end
  return setmetatable({ forward = spec.forward, backward = spec.backward, name = name, c_name = c_name }, Function)
end

return M
