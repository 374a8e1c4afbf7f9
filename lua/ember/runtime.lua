-- ember.runtime: threads, memory accounting and build information (core.h).
return function(ember)
  local C, ffi = ember.C, ember.ffi

  -- One knob for ember's OpenMP loops and OpenBLAS (EMBER_NUM_THREADS sets the default).
  function ember.set_num_threads(n)
    if type(n) ~= 'number' or n ~= math.floor(n) or n < 1 then
      error(string.format('set_num_threads: expected an integer >= 1, got %s', tostring(n)), 2)
    end
    C.em_set_num_threads(n)
  end
  function ember.get_num_threads() return tonumber(C.em_get_num_threads()) end

  -- Bytes held by tensor storages now, and the most held since start (or reset).
  function ember.memory_allocated() return tonumber(C.em_memory_allocated()) end
  function ember.memory_peak() return tonumber(C.em_memory_peak()) end
  function ember.reset_memory_peak() C.em_memory_reset_peak() end

  ember.version = ember._VERSION
  function ember.build_features()
    local list = {}
    for f in ffi.string(C.em_build_features()):gmatch('%S+') do list[#list + 1] = f end
    return list
  end
  function ember.device_count(kind)
    if kind == nil or kind == 'cpu' then return 1 end
    if kind == 'cuda' then return tonumber(C.em_device_count(C.EM_CUDA)) end
    error(string.format("device_count: expected 'cpu' or 'cuda', got %s", tostring(kind)), 2)
  end
end
