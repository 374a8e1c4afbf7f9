-- Loaded by busted before every spec: makes `ember` global and adds shared assertions.
ember = require 'ember'

-- One suite, two devices: EMBER_TEST_DEVICE=cuda (or cuda:1) runs the specs that use
-- `test_device` on a GPU; the default is 'cpu'. A spec makes its inputs with
-- {device = test_device} or moves them with on_device(t), and compares results on the CPU
-- (t:cpu(), or any read such as totable/item, which copies back by itself).
test_device = os.getenv('EMBER_TEST_DEVICE') or 'cpu'
if test_device == '' then test_device = 'cpu' end

-- t on test_device (t itself when it is already there).
function on_device(t) return t:to(test_device) end

-- File helpers shared by the specs. test_tmpdir() must be called inside an `it` block:
-- the folder is removed when that test ends.
function test_tmpdir()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute('mkdir -p ' .. dir) == 0)
  -- busted's `finally` lives in the spec's environment, not this file's
  getfenv(2).finally(function() os.execute('rm -rf ' .. dir) end)
  return dir
end

function test_write(path, bytes)
  local f = assert(io.open(path, 'wb'))
  f:write(bytes)
  f:close()
  return path
end

-- The file's contents, or nil when it cannot be read.
function test_read(path)
  local f = io.open(path, 'rb')
  if not f then return nil end
  local s = f:read('*a')
  f:close()
  return s
end
