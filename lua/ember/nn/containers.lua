-- ModuleList and ModuleDict: modules held in a list or under names, registered as children
-- (their parameters are the container's, state_dict names as PyTorch's: "layers.0.weight",
-- "heads.cls.bias"). Neither has a forward: a model's forward walks them. nn/init.lua puts
-- them in ember.nn.
--
--   function Net:init() self.layers = nn.ModuleList{ nn.Linear(4, 8), nn.Linear(8, 2) } end
--   function Net:forward(x)
--     for _, layer in self.layers:iter() do x = layer(x):relu() end
--     return x
--   end
local nn = setmetatable({}, { __index = require 'ember.nn.module' })
local I = require 'ember.internal'
local throw, describe = I.throw, I.describe
local Module = nn.Module

local function need_module(op, m, what)
  if not nn.is_module(m) then throw(string.format('%s: expected a module%s, got %s', op, what or '', describe(m))) end
end

-- Empties the child registry and registers the modules again in order, named '0', '1', ...
local function renumber(self, list)
  local r = rawget(self, '_modules')
  r.names, r.map = {}, {}
  for i, m in ipairs(list) do
    r.names[i] = tostring(i - 1)
    r.map[r.names[i]] = m
  end
end

-- ---------------------------------------------------------------- ModuleList
-- ModuleList([{m1, m2, ...}]): list[i] is the i-th module (1-based, negative from the end;
-- list[i] = m replaces it); len(), iter() (for i, m in list:iter()), append(m),
-- extend{...}, insert(i, m), list() (a plain Lua list).
local ModuleList = Module:extend('ModuleList')
nn.ModuleList = ModuleList

local function position(self, op, i, extra)
  local n = #rawget(self, '_modules').names
  if type(i) ~= 'number' or i ~= math.floor(i) then
    throw(string.format('%s: expected an integer position, got %s', op, describe(i)))
  end
  local m = n + (extra or 0)
  local p = i > 0 and i or m + i + 1
  if p < 1 or p > m then
    throw(string.format('%s: position %d out of range for a list of %d modules (expected 1..%d or -%d..-1)', op, i,
      n, m, m))
  end
  return p
end

local list_index, list_newindex = ModuleList.__index, ModuleList.__newindex
ModuleList.__index = function(self, k)
  if type(k) == 'number' then
    local r = rawget(self, '_modules')
    return r.map[r.names[position(self, 'ModuleList', k)]]
  end
  return list_index(self, k)
end
ModuleList.__newindex = function(self, k, v)
  if type(k) == 'number' then
    need_module('ModuleList', v, ' to assign')
    local r = rawget(self, '_modules')
    r.map[r.names[position(self, 'ModuleList', k)]] = v
    return
  end
  return list_newindex(self, k, v)
end

function ModuleList:init(list)
  if list == nil then return end
  if type(list) ~= 'table' or nn.is_module(list) then
    throw('ModuleList: expected a list of modules, got ' .. describe(list))
  end
  self:extend(list)
end

function ModuleList:len() return #rawget(self, '_modules').names end
function ModuleList:list()
  local r, out = rawget(self, '_modules'), {}
  for i, n in ipairs(r.names) do out[i] = r.map[n] end
  return out
end
function ModuleList:iter() return ipairs(self:list()) end

function ModuleList:append(m)
  need_module('append', m)
  self:add_module(tostring(self:len()), m)
  return self
end
function ModuleList:extend(list)
  if type(list) ~= 'table' then throw('extend: expected a list of modules, got ' .. describe(list)) end
  for i = 1, #list do need_module('extend', list[i], string.format(' at position %d of the list', i)) end
  for i = 1, #list do self:append(list[i]) end
  return self
end
-- insert(i, m): m becomes the i-th module (1..len + 1); the ones after it move up.
function ModuleList:insert(i, m)
  need_module('insert', m)
  local p = position(self, 'insert', i, 1)
  local list = self:list()
  table.insert(list, p, m)
  renumber(self, list)
  return self
end
function ModuleList:forward()
  throw('ModuleList: a ModuleList has no forward; call its modules from your own forward (for _, m in list:iter())')
end

-- ---------------------------------------------------------------- ModuleDict
-- ModuleDict([{name = m, ...} or {{'name', m}, ...}]): modules under names (a Lua table's
-- names are taken in sorted order, as it has no order of its own; the list of pairs keeps
-- its order). dict.name / dict[name] is the module (assigning registers or replaces it,
-- nil removes it); keys(), values(), items() ({name, m} pairs), len(), contains(name),
-- update(table), pop(name). Names that are also method names hide those methods.
local ModuleDict = Module:extend('ModuleDict')
nn.ModuleDict = ModuleDict

local function entries(op, tbl)
  if type(tbl) ~= 'table' or nn.is_module(tbl) then
    throw(op .. ': expected {name = module, ...} or {{name, module}, ...}, got ' .. describe(tbl))
  end
  local out = {}
  if #tbl > 0 then
    for i, pair in ipairs(tbl) do
      if type(pair) ~= 'table' or type(pair[1]) ~= 'string' or not nn.is_module(pair[2]) then
        throw(string.format("%s: entry %d must be a pair {'name', module}, got %s", op, i, describe(pair)))
      end
      out[i] = pair
    end
    return out
  end
  local names = {}
  for k, v in pairs(tbl) do
    if type(k) ~= 'string' then throw(string.format('%s: names must be strings, got %s', op, describe(k))) end
    need_module(op, v, string.format(" under '%s'", k))
    names[#names + 1] = k
  end
  table.sort(names)
  for i, k in ipairs(names) do out[i] = { k, tbl[k] } end
  return out
end

function ModuleDict:init(tbl)
  if tbl ~= nil then self:update(tbl) end
end
function ModuleDict:update(tbl)
  for _, pair in ipairs(entries('update', tbl)) do self:add_module(pair[1], pair[2]) end
  return self
end
function ModuleDict:len() return #rawget(self, '_modules').names end
function ModuleDict:keys()
  local out = {}
  for i, n in ipairs(rawget(self, '_modules').names) do out[i] = n end
  return out
end
function ModuleDict:values()
  local r, out = rawget(self, '_modules'), {}
  for i, n in ipairs(r.names) do out[i] = r.map[n] end
  return out
end
function ModuleDict:items()
  local r, out = rawget(self, '_modules'), {}
  for i, n in ipairs(r.names) do out[i] = { n, r.map[n] } end
  return out
end
function ModuleDict:contains(name) return rawget(self, '_modules').map[name] ~= nil end
function ModuleDict:pop(name)
  local m = rawget(self, '_modules').map[name]
  if m == nil then throw(string.format("pop: no module named '%s'", tostring(name))) end
  self[name] = nil
  return m
end
function ModuleDict:forward()
  throw('ModuleDict: a ModuleDict has no forward; call its modules from your own forward (dict[name](x))')
end

return { ModuleList = ModuleList, ModuleDict = ModuleDict }
