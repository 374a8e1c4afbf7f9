-- ember: tensors, autograd, nn, optim, data, dist and graphs for LuaJIT.
-- Loads libember through the FFI. Inside the ember host the library is already in the
-- process; from a stock luajit it is the path in EMBER_LIB, or libember.so on package.cpath
-- (LUA_CPATH), or PREFIX/lib/libember.so beside an installed copy of this file.
local ffi = require 'ffi'

ffi.cdef(require 'ember.cdefs')

-- Debian's OpenBLAS 0.3.21 does not recognise recent Xeons and falls back to slow SSE3
-- kernels; it reads OPENBLAS_CORETYPE when it loads. The ember host sets it before
-- OpenBLAS loads; from a stock luajit, OpenBLAS loads with libember below, so set it here.
local function select_blas_kernels()
  if os.getenv('OPENBLAS_CORETYPE') or os.getenv('EMBER_NO_REEXEC') then return end
  local f = io.open('/proc/cpuinfo', 'r')
  if not f then return end
  local flags = ''
  for line in f:lines() do
    if line:match('^flags') then flags = ' ' .. line .. ' '; break end
  end
  f:close()
  local core
  if flags:find(' avx512f ') and flags:find(' avx512bw ') and flags:find(' avx512vl ') then core = 'SkylakeX'
  elseif flags:find(' avx2 ') and flags:find(' fma ') then core = 'Haswell' end
  local libc = require 'ember.util.libc'
  if core then libc.setenv('OPENBLAS_CORETYPE', core) end
  -- OpenMP's threads sleep between parallel regions instead of spinning (see
  -- bindings/ember/blas_env.c for the figures); libgomp also loads with libember.
  if not os.getenv('OMP_WAIT_POLICY') and not os.getenv('GOMP_SPINCOUNT') then
    libc.setenv('OMP_WAIT_POLICY', 'passive')
  end
end

-- An installed ember keeps this file in PREFIX/share/lua/5.1/ember/ and the library in
-- PREFIX/lib (CMakeLists.txt, install): the prefix is found from where this file was loaded.
local function installed_library()
  local source = debug.getinfo(1, 'S').source
  local prefix = source:match('^@(.*)/share/lua/5%.1/ember/init%.lua$')
  if not prefix then return nil end
  local path = prefix .. '/lib/libember.so'
  local f = io.open(path, 'rb')
  if not f then return nil end
  f:close()
  return path
end

local function load_library()
  local ok = pcall(function() return ffi.C.em_version end)
  if ok then return ffi.C end
  select_blas_kernels()
  local path = os.getenv('EMBER_LIB') or package.searchpath('libember', package.cpath) or installed_library()
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

-- Modules that add functions to ember itself return a table of them; a name defined by
-- two of them is a bug, caught here.
local function merge(mod)
  for k, v in pairs(mod) do
    assert(ember[k] == nil, 'ember: ' .. tostring(k) .. ' is defined by two modules')
    ember[k] = v
  end
end

package.loaded['ember'] = ember   -- submodules may require 'ember' while it loads
merge(require 'ember.runtime')
merge(require 'ember.tensor')
merge(require 'ember.autograd')  -- also ember.autograd
merge(require 'ember.sparse')    -- SparseGrad, row-sparse gradients
ember.cuda = require('ember.cuda')      -- loads the CUDA plugin only when asked something
ember.nn = require('ember.nn')
ember.optim = require('ember.optim')
merge(require 'ember.amp')       -- autocast, GradScaler; also ember.amp
merge(require 'ember.io')
ember.data = require('ember.data')
ember.graph = require('ember.graph')
ember.dist = require('ember.dist')      -- loads no MPI until ember.dist.init()
ember.tensorboard = require('ember.tensorboard')   -- SummaryWriter: TensorBoard event files
ember.display = require('ember.display')  -- notebook display, images (ember kernel)
ember.plot = require('ember.plot')        -- plots through cairo (loaded on first drawing)
ember.text = require('ember.text')      -- tokenizers and token streams for language models
ember.serve = require('ember.serve')    -- Client of ember serve's ZeroMQ endpoint
return ember
