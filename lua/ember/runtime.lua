-- ember.runtime: threads, memory accounting and build information (core.h).
local M = {}   -- init.lua puts these in ember
local ffi = require 'ffi'
local C = require('ember.internal').C

-- One knob for ember's OpenMP loops and OpenBLAS (EMBER_NUM_THREADS sets the default).
function M.set_num_threads(n)
  if type(n) ~= 'number' or n ~= math.floor(n) or n < 1 then
    error(string.format('set_num_threads: expected an integer >= 1, got %s', tostring(n)), 2)
  end
  C.em_set_num_threads(n)
end
function M.get_num_threads() return tonumber(C.em_get_num_threads()) end

-- Bytes held by tensor storages now, and the most held since start (or reset).
function M.memory_allocated() return tonumber(C.em_memory_allocated()) end
function M.memory_peak() return tonumber(C.em_memory_peak()) end
function M.reset_memory_peak() C.em_memory_reset_peak() end

M.version = ffi.string(C.em_version())
function M.build_features()
  local list = {}
  for f in ffi.string(C.em_build_features()):gmatch('%S+') do list[#list + 1] = f end
  return list
end
function M.device_count(kind)
  if kind == nil or kind == 'cpu' then return 1 end
  if kind == 'cuda' then return tonumber(C.em_device_count(C.EM_CUDA)) end
  error(string.format("device_count: expected 'cpu' or 'cuda', got %s", tostring(kind)), 2)
end

return M
