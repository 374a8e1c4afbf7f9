-- ember: tensors, autograd, nn, optim, data, dist and graphs for LuaJIT.
-- Loads libember through the FFI. Inside the ember host the library is already in the
-- process; from a stock luajit it is found on package.cpath (LUA_CPATH) as libember.so,
-- or at the path in EMBER_LIB.
local ffi = require 'ffi'

ffi.cdef(require 'ember.cdefs')

local function load_library()
  local ok = pcall(function() return ffi.C.em_version end)
  if ok then return ffi.C end
  local path = os.getenv('EMBER_LIB') or package.searchpath('libember', package.cpath)
  if not path then
    error("ember: cannot find libember.so; set LUA_CPATH to include the build folder " ..
          "(e.g. LUA_CPATH='build/?.so;;') or EMBER_LIB to the library's path", 2)
  end
  return ffi.load(path)
end

local ember = {}
ember.C = load_library()
ember.ffi = ffi
ember._VERSION = ffi.string(ember.C.em_version())

package.loaded['ember'] = ember   -- submodules may require 'ember' while it loads
require('ember.tensor')(ember)
return ember
