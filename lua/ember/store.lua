-- ember.store: the key-value store of distributed rendezvous, on PyTorch's c10d TCPStore
-- protocol (ember/dist.h em_dist_store_*, runtime/distributed/store*.c). Reached as
-- ember.dist.Store: torch.distributed.TCPStore talks to its server, it to torch's.
--
--   local s = ember.dist.Store{host = '127.0.0.1', port = 29500, server = true}  -- or a client
--   s:set('k', 'v'); s:get('k')        -- 'v' (get waits for the key up to the timeout)
--   s:add('n', 2)                       -- 2: integers as decimal text, absent = 0
--   s:wait{'a', 'b'}; s:check{'a'}      -- wait raises after the timeout; check says true/false
--   s:delete('k'); s:num_keys(); s:port(); s:close()
local ffi = require 'ffi'
local I = require 'ember.internal'
local C = I.C
local throw, describe, check, check_opts, option_set = I.throw, I.describe, I.check, I.check_opts, I.option_set

local Store = {}
Store.__index = Store

local OPTS = option_set('host', 'port', 'server', 'timeout')
-- Store{host = '127.0.0.1', port = 29500, server = false, timeout = 300}: server = true hosts
-- a store on port (0: any free port; s:port() says which) and connects to it.
function Store.new(opts)
  check_opts('Store', opts, OPTS, 1)
  opts = opts or {}
  local host, port, timeout = opts.host or '127.0.0.1', opts.port or 29500, opts.timeout or 300
  if type(host) ~= 'string' then throw('Store: host must be a string, got ' .. describe(host)) end
  if type(port) ~= 'number' or port ~= math.floor(port) then
    throw('Store: port must be an integer, got ' .. describe(port))
  end
  if type(timeout) ~= 'number' then throw('Store: timeout must be a number of seconds, got ' .. describe(timeout)) end
  local box = ffi.new('em_dist_store*[1]')
  check(C.em_dist_store_open(box, host, port, opts.server and 1 or 0, timeout))
  return setmetatable({ _ptr = ffi.gc(box[0], C.em_dist_store_close) }, Store)
end

local function ptr(s, op)
  if getmetatable(s) ~= Store or s._ptr == nil then throw(op .. ': the store is closed') end
  return s._ptr
end

local function key_list(op, keys)
  if type(keys) == 'string' then keys = { keys } end
  if type(keys) ~= 'table' or #keys == 0 then
    throw(op .. ': expected a key or a list of keys, got ' .. describe(keys))
  end
  local arr = ffi.new('const char*[?]', #keys)
  for i, k in ipairs(keys) do
    if type(k) ~= 'string' then throw(string.format('%s: key %d is %s, expected a string', op, i, describe(k))) end
    arr[i - 1] = k
  end
  return #keys, arr, keys -- keys keeps the strings alive while arr points at them
end

function Store:port() return C.em_dist_store_port(ptr(self, 'Store:port')) end

function Store:set(key, value)
  value = tostring(value)
  check(C.em_dist_store_set(ptr(self, 'Store:set'), key, value, #value))
end

function Store:get(key)
  local p, cap, len = ptr(self, 'Store:get'), 4096, ffi.new('size_t[1]')
  while true do
    local buf = ffi.new('char[?]', cap)
    check(C.em_dist_store_get(p, key, buf, cap, len))
    if len[0] <= cap then return ffi.string(buf, len[0]) end
    cap = tonumber(len[0]) -- larger than the buffer: read it again, whole
  end
end

function Store:add(key, delta)
  local out = ffi.new('int64_t[1]')
  check(C.em_dist_store_add(ptr(self, 'Store:add'), key, delta or 0, out))
  return tonumber(out[0])
end

function Store:wait(keys, timeout)
  local n, arr, keep = key_list('Store:wait', keys)
  check(C.em_dist_store_wait(ptr(self, 'Store:wait'), n, arr, timeout or 0))
  return keep ~= nil
end

function Store:check(keys)
  local n, arr, keep = key_list('Store:check', keys)
  local out = ffi.new('int[1]')
  check(C.em_dist_store_check(ptr(self, 'Store:check'), n, arr, out))
  return keep ~= nil and out[0] == 1
end

function Store:delete(key)
  local out = ffi.new('int[1]')
  check(C.em_dist_store_delete(ptr(self, 'Store:delete'), key, out))
  return out[0] == 1
end

function Store:num_keys()
  local out = ffi.new('int64_t[1]')
  check(C.em_dist_store_num_keys(ptr(self, 'Store:num_keys'), out))
  return tonumber(out[0])
end

function Store:close()
  if self._ptr ~= nil then
    C.em_dist_store_close(ffi.gc(self._ptr, nil))
    self._ptr = nil
  end
end

return Store
