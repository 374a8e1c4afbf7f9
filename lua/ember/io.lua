-- ember.io: checkpoints in the safetensors format (readable by PyTorch, NumPy and the
-- Hugging Face tools), over runtime/io/safetensors.c.
--
--   ember.save('model.safetensors', model:state_dict(), {metadata = {epoch = '3'}})
--   local tensors, metadata = ember.load('model.safetensors')
--
-- Saving is atomic (a temporary file renamed over the path); loading maps the file and
-- the tensors share the mapping (no copy; writing them never changes the file).
local ffi = require 'ffi'

local M = {}   -- init.lua puts these in ember
local I = require 'ember.internal'
local C = I.C
local is_tensor, throw, check = I.is_tensor, I.throw, I.check
local describe = I.a_type_name

local function key_text(k)
  return type(k) == 'string' and ("'" .. k .. "'") or string.format('%s (%s)', tostring(k), type(k))
end

-- C sees NUL-terminated strings: an embedded NUL would silently cut a name or path.
local function no_nul(what, s)
  if s:find('\0', 1, true) then throw(string.format('%s %q contains a NUL character', what, s)) end
end

-- Sorted string keys of t, after checking every key and value with check_pair.
local function sorted_keys(t, check_pair)
  local keys = {}
  for k, v in pairs(t) do
    check_pair(k, v)
    keys[#keys + 1] = k
  end
  table.sort(keys)
  return keys
end

function M.save(path, tensors, opts)
  if type(path) ~= 'string' then throw('save: expected a file path (string) for argument 1, got ' .. describe(path)) end
  if type(tensors) ~= 'table' then
    throw('save: expected a table of name = tensor for argument 2, got ' .. describe(tensors))
  end
  if opts ~= nil and type(opts) ~= 'table' then
    throw('save: expected an options table for argument 3, got ' .. describe(opts))
  end
  no_nul('save: the path', path)
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= 'metadata' then throw(string.format("save: unknown option %s (expected metadata)", key_text(k))) end
  end
  local names = sorted_keys(tensors, function(k, v)
    if type(k) ~= 'string' then
      throw(string.format('save: tensor names must be strings, got the key %s', key_text(k)))
    end
    if not is_tensor(v) then
      throw(string.format("save: the value for '%s' must be a tensor, got %s", k, describe(v)))
    end
    no_nul('save: the tensor name', k)
  end)
  local metadata = opts.metadata or {}
  if type(metadata) ~= 'table' then
    throw('save: metadata must be a table of string = string, got ' .. describe(metadata))
  end
  local keys = sorted_keys(metadata, function(k, v)
    if type(k) ~= 'string' then
      throw(string.format('save: metadata keys must be strings, got the key %s', key_text(k)))
    end
    if type(v) ~= 'string' then
      throw(string.format("save: metadata value for '%s' must be a string (safetensors metadata holds text; "
        .. "use tostring), got %s", k, describe(v)))
    end
    no_nul('save: the metadata key', k)
    no_nul('save: the metadata value', v)
  end)
  -- The Lua strings stay referenced by names/keys/metadata for the whole call.
  local n, nm = #names, #keys
  local cnames = ffi.new('const char *[?]', n + 1)
  local ctensors = ffi.new('em_tensor *[?]', n + 1)
  for i = 1, n do
    cnames[i - 1] = names[i]
    ctensors[i - 1] = tensors[names[i]]
  end
  local ckeys = ffi.new('const char *[?]', nm + 1)
  local cvalues = ffi.new('const char *[?]', nm + 1)
  for i = 1, nm do
    ckeys[i - 1] = keys[i]
    cvalues[i - 1] = metadata[keys[i]]
  end
  check(C.em_safetensors_save(path, n, cnames, ctensors, nm, ckeys, cvalues))
end

local fbox = ffi.new('em_safetensors *[1]')
local tbox = ffi.new('em_tensor *[1]')

-- Returns name -> tensor and the file's metadata (key -> string; empty when none).
function M.load(path)
  if type(path) ~= 'string' then throw('load: expected a file path (string) for argument 1, got ' .. describe(path)) end
  no_nul('load: the path', path)
  local status = C.em_safetensors_open(fbox, path)
  local f = fbox[0]
  fbox[0] = nil
  check(status)
  f = ffi.gc(f, C.em_safetensors_close)   -- closed even if a get below fails
  local tensors = {}
  for i = 0, C.em_safetensors_count(f) - 1 do
    tbox[0] = nil
    status = C.em_safetensors_get(f, i, tbox)
    local t = tbox[0]
    tbox[0] = nil
    check(status)
    tensors[ffi.string(C.em_safetensors_name(f, i))] = I.wrap(t)
  end
  local metadata = {}
  for i = 0, C.em_safetensors_metadata_count(f) - 1 do
    metadata[ffi.string(C.em_safetensors_metadata_key(f, i))] = ffi.string(C.em_safetensors_metadata_value(f, i))
  end
  C.em_safetensors_close(ffi.gc(f, nil))
  return tensors, metadata
end

return M
