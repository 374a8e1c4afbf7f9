-- ember.nn.Module: the base class of every layer and model, after torch.nn.Module.
--
-- A module holds parameters (leaf tensors that require grad), buffers (state that is
-- saved but not trained: running statistics) and child modules, each under a name, in
-- the order they were assigned. Calling a module runs its forward.
--
-- Writing a module: extend a class, give it an init (the constructor) and a forward.
--
--   local MyNet = nn.Module:extend('MyNet')
--   function MyNet:init(n_in, n_out)
--     self.fc1 = nn.Linear(n_in, 64)                 -- a child module
--     self.fc2 = nn.Linear(64, n_out)
--     self.scale = nn.Parameter(ember.ones(1))      -- a parameter
--     self:register_buffer('calls', ember.zeros(1)) -- a buffer
--     self.act = 'relu'                             -- a plain field
--   end
--   function MyNet:forward(x) return self.fc2(self.fc1(x):relu()) * self.scale end
--   local net = MyNet(784, 10)
--
-- Assigning a Module to a field registers a child; assigning a leaf tensor that requires
-- grad registers a parameter; assigning to a registered name replaces it (nil removes
-- it). Everything else is a plain field. A subclass of a subclass calls its parent's
-- constructor explicitly: function Sub:init(...) Parent.init(self, ...) end.
--
-- Names are dotted paths as in PyTorch ("fc1.weight", "0.bias" inside a Sequential), so
-- state_dict() files line up with PyTorch's.
local ember = require 'ember'

-- Module, Parameter and is_module; nn/init.lua puts them in ember.nn.
local nn = {}
local I = require 'ember.internal'
local throw, describe, is_tensor = I.throw, I.describe, I.is_tensor

local Module = { __name = 'Module' }

-- ---------------------------------------------------------------- instances
-- Registered entries live in ordered registries, never as raw fields, so that every
-- assignment to their names goes through __newindex.
local function registry()
  return { names = {}, map = {} }
end

local function reg_set(r, name, value)
  if r.map[name] == nil then r.names[#r.names + 1] = name end
  r.map[name] = value
end

local function reg_remove(r, name)
  if r.map[name] == nil then return end
  r.map[name] = nil
  for i, n in ipairs(r.names) do
    if n == name then table.remove(r.names, i); break end
  end
end

local function is_module(x)
  if type(x) ~= 'table' then return false end
  local mt = getmetatable(x)
  return type(mt) == 'table' and mt.__is_module_class == true
end
nn.is_module = is_module
Module.__is_module_class = true

-- Field lookup: registries first, then the class chain.
local function instance_index(self, k)
  local p = rawget(self, '_parameters')
  if p then
    local v = p.map[k]
    if v ~= nil then return v end
    v = rawget(self, '_modules').map[k]
    if v ~= nil then return v end
    v = rawget(self, '_buffers').map[k]
    if v ~= nil then return v end
  end
  return getmetatable(self).__class[k]
end

local function instance_newindex(self, k, v)
  if type(k) ~= 'string' then
    throw(string.format('%s: field names must be strings, got %s', self.__name, describe(k)))
  end
  local params, modules, buffers = rawget(self, '_parameters'), rawget(self, '_modules'), rawget(self, '_buffers')
  if is_module(v) then
    reg_remove(params, k); reg_remove(buffers, k)
    return reg_set(modules, k, v)
  end
  if is_tensor(v) and v.requires_grad and v:is_leaf() then
    reg_remove(modules, k); reg_remove(buffers, k)
    return reg_set(params, k, v)
  end
  if buffers.map[k] ~= nil then
    if v ~= nil and not is_tensor(v) then
      throw(string.format("%s: buffer '%s' can only be replaced by a tensor or nil, got %s", self.__name, k,
        describe(v)))
    end
    if v == nil then return reg_remove(buffers, k) end
    return reg_set(buffers, k, v)
  end
  if params.map[k] ~= nil then
    if v ~= nil then
      throw(string.format("%s: parameter '%s' can only be replaced by a leaf tensor that requires grad " ..
        "(nn.Parameter(t)) or nil, got %s", self.__name, k, describe(v)))
    end
    return reg_remove(params, k)
  end
  if modules.map[k] ~= nil then
    if v ~= nil then
      throw(string.format("%s: child module '%s' can only be replaced by a module or nil, got %s", self.__name, k,
        describe(v)))
    end
    return reg_remove(modules, k)
  end
  rawset(self, k, v)
end

-- ---------------------------------------------------------------- calling, forward hooks
-- Calling a module runs its forward pre-hooks, forward, then its forward hooks (after
-- PyTorch's register_forward_pre_hook / register_forward_hook):
--   pre-hook fn(module, ...) sees the arguments; returning values replaces them;
--   hook fn(module, inputs, output) sees the arguments (a table, inputs.n of them) and
--   forward's (first) result; returning a value replaces that result.
-- Each register_* returns a handle whose :remove() takes the hook out. A module with no
-- hooks costs one lookup per call.
local unpack = unpack or table.unpack
local function pack(...) return { n = select('#', ...), ... } end

local function run_hooks(self, pre, post, ...)
  local args = pack(...)
  if pre then
    for _, h in ipairs(pre) do
      local r = pack(h.fn(self, unpack(args, 1, args.n)))
      if r.n > 0 and r[1] ~= nil then args = r end
    end
  end
  local out = pack(self:forward(unpack(args, 1, args.n)))
  if post then
    for _, h in ipairs(post) do
      local r = h.fn(self, args, out[1])
      if r ~= nil then out[1] = r end
    end
  end
  return unpack(out, 1, math.max(out.n, 1))
end

local function call_module(self, ...)
  local pre, post = rawget(self, '_forward_pre_hooks'), rawget(self, '_forward_hooks')
  if pre == nil and post == nil then return self:forward(...) end
  return run_hooks(self, pre, post, ...)
end

local Handle = {}
Handle.__index = Handle
-- remove(): takes the hook out (again: nothing happens).
function Handle:remove()
  local list = rawget(self.module, self.field)
  if not list then return end
  for i, h in ipairs(list) do
    if h == self.entry then table.remove(list, i); break end
  end
  if #list == 0 then rawset(self.module, self.field, nil) end
end

local function add_hook(self, op, field, fn)
  if type(fn) ~= 'function' then throw(string.format('%s: expected a function, got %s', op, describe(fn))) end
  local list = rawget(self, field)
  if not list then
    list = {}
    rawset(self, field, list)
  end
  local entry = { fn = fn }
  list[#list + 1] = entry
  return setmetatable({ module = self, field = field, entry = entry }, Handle)
end

function Module:register_forward_pre_hook(fn)
  return add_hook(self, 'register_forward_pre_hook', '_forward_pre_hooks', fn)
end
function Module:register_forward_hook(fn)
  return add_hook(self, 'register_forward_hook', '_forward_hooks', fn)
end
-- True when calling m runs hooks (Sequential keeps such modules in their written order).
function nn.has_forward_hooks(m)
  return rawget(m, '_forward_pre_hooks') ~= nil or rawget(m, '_forward_hooks') ~= nil
end

-- ---------------------------------------------------------------- classes
local function class_call(cls, ...) return cls.new(cls, ...) end

-- Module:extend(name): a subclass. Metamethods are copied because Lua reads them from the
-- metatable itself, never through __index.
function Module.extend(parent, name)
  if type(name) ~= 'string' then throw('extend: expected a class name (string), got ' .. describe(name)) end
  local cls = setmetatable({}, { __index = parent, __call = class_call, __tostring = function() return name end })
  cls.__name = name
  cls.__class = cls
  cls.super = parent
  cls.__index = instance_index
  cls.__newindex = instance_newindex
  cls.__call = call_module
  cls.__tostring = function(self) return self:repr() end
  cls.__is_module_class = true
  return cls
end

function Module.new(cls, ...)
  local self = setmetatable({
    _parameters = registry(), _buffers = registry(), _modules = registry(),
    _non_persistent = {}, training = true,
  }, cls)
  self:init(...)
  return self
end

-- The base constructor has nothing to set up; subclasses replace it.
function Module:init() end

function Module:forward()
  throw(string.format('%s: forward is not implemented (define function %s:forward(...))', self.__name, self.__name))
end

Module.__class = Module
Module.__index = instance_index
Module.__newindex = instance_newindex
Module.__call = call_module
Module.__tostring = function(self) return self:repr() end
setmetatable(Module, { __call = class_call, __tostring = function() return 'Module' end })

-- nn.Parameter(t): t as a trainable leaf (requires grad). Returns t.
function nn.Parameter(t, requires_grad)
  if not is_tensor(t) then throw('Parameter: expected a tensor, got ' .. describe(t)) end
  if not t:is_leaf() then t = t:detach() end
  return t:requires_grad_(requires_grad ~= false)
end

-- ---------------------------------------------------------------- registration
local function check_name(self, op, name)
  if type(name) ~= 'string' or name == '' or name:find('.', 1, true) then
    throw(string.format("%s: expected a non-empty name without '.', got %s", op,
      type(name) == 'string' and ("'" .. name .. "'") or describe(name)))
  end
end

-- register_parameter(name, t): t (a tensor, made a leaf that requires grad) or nil.
function Module:register_parameter(name, t)
  check_name(self, 'register_parameter', name)
  if t == nil then return reg_remove(self._parameters, name) end
  if not is_tensor(t) then throw('register_parameter: expected a tensor or nil, got ' .. describe(t)) end
  return instance_newindex(self, name, nn.Parameter(t))
end

-- register_buffer(name, t [, {persistent = true}]): state saved by state_dict (unless
-- persistent is false) and moved by to(), but not trained.
function Module:register_buffer(name, t, opts)
  check_name(self, 'register_buffer', name)
  if t ~= nil and not is_tensor(t) then throw('register_buffer: expected a tensor or nil, got ' .. describe(t)) end
  reg_remove(self._parameters, name)
  reg_remove(self._modules, name)
  rawset(self, name, nil)
  if t == nil then return reg_remove(self._buffers, name) end
  reg_set(self._buffers, name, t)
  self._non_persistent[name] = (opts and opts.persistent == false) or nil
end

-- add_module(name, m): a child module (as self[name] = m).
function Module:add_module(name, m)
  check_name(self, 'add_module', name)
  if not is_module(m) then throw('add_module: expected a module, got ' .. describe(m)) end
  return instance_newindex(self, name, m)
end

-- ---------------------------------------------------------------- traversal
-- children(): the direct children in order; named_children(): {name, module} pairs.
function Module:named_children()
  local out = {}
  for _, n in ipairs(self._modules.names) do out[#out + 1] = { n, self._modules.map[n] } end
  return out
end
function Module:children()
  local out = {}
  for _, n in ipairs(self._modules.names) do out[#out + 1] = self._modules.map[n] end
  return out
end

-- named_modules(): {name, module} for self ('') and every descendant, depth first, each
-- module once.
function Module:named_modules(prefix, out, seen)
  out, seen, prefix = out or {}, seen or {}, prefix or ''
  if seen[self] then return out end
  seen[self] = true
  out[#out + 1] = { prefix, self }
  for _, n in ipairs(self._modules.names) do
    self._modules.map[n]:named_modules(prefix == '' and n or (prefix .. '.' .. n), out, seen)
  end
  return out
end
function Module:modules()
  local out = {}
  for i, pair in ipairs(self:named_modules()) do out[i] = pair[2] end
  return out
end

-- named_parameters(): {name, tensor} pairs in registration order, depth first; a tensor
-- shared by two modules comes once. parameters(): the tensors alone.
local function named_entries(self, field, skip_non_persistent)
  local out, seen = {}, {}
  for _, pair in ipairs(self:named_modules()) do
    local prefix, m = pair[1], pair[2]
    local r = m[field]
    for _, n in ipairs(r.names) do
      local t = r.map[n]
      if not seen[t] and not (skip_non_persistent and m._non_persistent[n]) then
        seen[t] = true
        out[#out + 1] = { prefix == '' and n or (prefix .. '.' .. n), t }
      end
    end
  end
  return out
end
function Module:named_parameters() return named_entries(self, '_parameters') end
function Module:named_buffers() return named_entries(self, '_buffers') end
function Module:parameters()
  local out = {}
  for i, pair in ipairs(named_entries(self, '_parameters')) do out[i] = pair[2] end
  return out
end
function Module:buffers()
  local out = {}
  for i, pair in ipairs(named_entries(self, '_buffers')) do out[i] = pair[2] end
  return out
end

-- apply(fn): fn(m) for every descendant, then self (children first, as PyTorch). Returns self.
function Module:apply(fn)
  for _, n in ipairs(self._modules.names) do self._modules.map[n]:apply(fn) end
  fn(self)
  return self
end

-- train([mode = true]) / eval(): sets the training flag of self and every descendant.
function Module:train(mode)
  if mode == nil then mode = true end
  if type(mode) ~= 'boolean' then throw('train: expected a boolean or nil, got ' .. describe(mode)) end
  for _, m in ipairs(self:modules()) do rawset(m, 'training', mode) end
  return self
end
function Module:eval() return self:train(false) end

-- zero_grad([{set_to_none = true}]): clears (or zero-fills) every parameter's .grad.
function Module:zero_grad(opts)
  I.check_opts('zero_grad', opts, I.option_set('set_to_none'), 1)
  local to_none = not (opts and opts.set_to_none == false)
  for _, p in ipairs(self:parameters()) do
    if to_none then p.grad = nil
    else
      local g = p.grad
      if g then ember.no_grad(function() g:zero_() end) end
    end
  end
end

-- to(dtype or device or {dtype =, device =}): converts every parameter and buffer
-- (integer buffers, such as counters, only change device). Parameters are replaced by
-- converted leaves that require grad, so create the optimizer after calling to().
-- Returns self.
function Module:to(...)
  local args = { ... }
  local device_args = {}
  for _, a in ipairs(args) do
    if type(a) == 'string' and not I.is_dtype_name(a) then device_args[#device_args + 1] = a
    elseif type(a) == 'table' and a.device ~= nil then device_args[#device_args + 1] = { device = a.device }
    elseif is_tensor(a) then device_args[#device_args + 1] = a.device end
  end
  local function convert(t, list)
    for _, a in ipairs(list) do t = t:to(a) end
    return t
  end
  ember.no_grad(function()
    for _, m in ipairs(self:modules()) do
      for _, n in ipairs(m._parameters.names) do
        local p = m._parameters.map[n]
        local q = convert(p, args)
        if q ~= p then m._parameters.map[n] = q:detach():requires_grad_(p.requires_grad) end
      end
      for _, n in ipairs(m._buffers.names) do
        local b = m._buffers.map[n]
        m._buffers.map[n] = convert(b, b:is_floating_point() and args or device_args)
      end
    end
  end)
  return self
end
function Module:float() return self:to('float32') end
function Module:double() return self:to('float64') end
-- cuda([i]): to GPU i (default: the current device); cpu(): back to the host.
function Module:cuda(i)
  if i ~= nil then return self:to('cuda:' .. I.need_integer('cuda', i, 1)) end
  return self:to(ember.cuda.is_available() and ('cuda:' .. ember.cuda.current_device()) or 'cuda')
end
function Module:cpu() return self:to('cpu') end

-- ---------------------------------------------------------------- state
-- state_dict(): name -> tensor for every parameter and persistent buffer (detached
-- views: saving them never records). Save with ember.save(path, model:state_dict()).
function Module:state_dict()
  local out = {}
  for _, pair in ipairs(named_entries(self, '_parameters')) do out[pair[1]] = pair[2]:detach() end
  for _, pair in ipairs(named_entries(self, '_buffers', true)) do out[pair[1]] = pair[2]:detach() end
  return out
end

local function sorted(list)
  table.sort(list)
  return list
end

-- load_state_dict(sd [, {strict = true}]): copies sd's tensors into the parameters and
-- buffers of the same names (converting dtype). Every problem is reported at once before
-- anything is copied: missing keys, unexpected keys (strict) and shape mismatches.
-- Returns {missing = {...}, unexpected = {...}} (what was left out when not strict).
function Module:load_state_dict(sd, opts)
  if type(sd) ~= 'table' then throw('load_state_dict: expected a table of name = tensor, got ' .. describe(sd)) end
  I.check_opts('load_state_dict', opts, I.option_set('strict'), 2)
  local strict = not (opts and opts.strict == false)
  local targets = {}
  for _, pair in ipairs(named_entries(self, '_parameters')) do targets[pair[1]] = pair[2] end
  for _, pair in ipairs(named_entries(self, '_buffers', true)) do targets[pair[1]] = pair[2] end
  local missing, unexpected, mismatched = {}, {}, {}
  for name, t in pairs(targets) do
    local src = sd[name]
    if src == nil then
      missing[#missing + 1] = name
    elseif not is_tensor(src) then
      mismatched[#mismatched + 1] = string.format("'%s' is %s, expected a tensor", name, describe(src))
    else
      local a, b = src.shape, t.shape
      local same = #a == #b
      for i = 1, #a do same = same and a[i] == b[i] end
      if not same then
        mismatched[#mismatched + 1] = string.format("'%s' has shape [%s] in the state dict, the model has [%s]",
          name, table.concat(a, ', '), table.concat(b, ', '))
      end
    end
  end
  for name in pairs(sd) do
    if targets[name] == nil then unexpected[#unexpected + 1] = tostring(name) end
  end
  sorted(missing); sorted(unexpected); sorted(mismatched)
  local problems = {}
  if strict and #missing > 0 then problems[#problems + 1] = 'missing keys: ' .. table.concat(missing, ', ') end
  if strict and #unexpected > 0 then
    problems[#problems + 1] = 'unexpected keys: ' .. table.concat(unexpected, ', ')
  end
  if #mismatched > 0 then problems[#problems + 1] = 'size mismatch: ' .. table.concat(mismatched, '; ') end
  if #problems > 0 then
    throw(string.format('load_state_dict: %s: %s', self.__name, table.concat(problems, '; ')))
  end
  ember.no_grad(function()
    for name, t in pairs(targets) do
      local src = sd[name]
      if src ~= nil then t:copy_(src) end
    end
  end)
  return { missing = missing, unexpected = unexpected }
end

-- ---------------------------------------------------------------- printing
-- extra_repr(): the text inside the parentheses, e.g. "in_features=4, out_features=2".
function Module:extra_repr() return '' end

-- repr(): the tree, as PyTorch prints it.
function Module:repr()
  local lines = {}
  for _, n in ipairs(self._modules.names) do
    local child = self._modules.map[n]:repr():gsub('\n', '\n  ')
    lines[#lines + 1] = '(' .. n .. '): ' .. child
  end
  local extra = self:extra_repr()
  if #lines == 0 then return self.__name .. '(' .. extra .. ')' end
  local head = self.__name .. '('
  if extra ~= '' then head = head .. extra end
  return head .. '\n  ' .. table.concat(lines, '\n  ') .. '\n)'
end

nn.Module = Module
return nn
