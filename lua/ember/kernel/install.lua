-- ember.kernel.install: `ember kernel install [--user | --prefix P] [--name N] [--display-name T]`
-- writes KERNELS/N/kernel.json (N = ember by default), the kernelspec Jupyter reads:
--   {"argv": [<this ember>, "kernel", "-f", "{connection_file}"], "display_name": "ember (LuaJIT)",
--    "language": "lua", "interrupt_mode": "signal", "metadata": {...}}
-- KERNELS is /usr/local/share/jupyter/kernels (system-wide, as `jupyter kernelspec install`),
-- $JUPYTER_DATA_DIR/kernels or ~/.local/share/jupyter/kernels with --user, and
-- P/share/jupyter/kernels with --prefix P. The display name names the GPU when there is one:
-- "ember (LuaJIT, NVIDIA H200)".
local message = require 'ember.kernel.message'
local libc = require 'ember.util.libc'

local M = {}

local function mkdirs(path)
  local at = ''
  for part in path:gmatch('[^/]+') do
    at = at .. '/' .. part
    if not libc.file_info(at) then
      local ok, errno = libc.mkdir(at, tonumber('755', 8))
      if not ok and not libc.file_info(at) then
        error(string.format("ember kernel install: cannot make the folder '%s': %s", at, libc.strerror(errno)), 0)
      end
    end
  end
end

local function gpu_name()
  local ok, name = pcall(function()
    local ember = require 'ember'
    if ember.cuda.device_count() > 0 then return ember.cuda.get_device_name(0) end
    return nil
  end)
  return ok and name or nil
end

local function executable()
  local exe = libc.readlink('/proc/self/exe')
  if not exe then error('ember kernel install: cannot find the path of this ember (/proc/self/exe)', 0) end
  return exe
end

function M.kernels_dir(how, prefix)
  if how == 'prefix' then return prefix:gsub('/+$', '') .. '/share/jupyter/kernels' end
  if how == 'user' then
    local data = os.getenv('JUPYTER_DATA_DIR')
    if data and data ~= '' then return data .. '/kernels' end
    local xdg, home = os.getenv('XDG_DATA_HOME'), os.getenv('HOME')
    if xdg and xdg ~= '' then return xdg .. '/jupyter/kernels' end
    if not home or home == '' then error('ember kernel install --user: HOME is not set', 0) end
    return home .. '/.local/share/jupyter/kernels'
  end
  return '/usr/local/share/jupyter/kernels'
end

function M.spec(display_name)
  local gpu = gpu_name()
  return {
    argv = message.array { executable(), 'kernel', '-f', '{connection_file}' },
    display_name = display_name or ('ember (LuaJIT' .. (gpu and (', ' .. gpu) or '') .. ')'),
    language = 'lua', interrupt_mode = 'signal',
    metadata = { debugger = false },
  }
end

function M.main(args)
  local how, prefix, name, display_name = 'system', nil, 'ember', nil
  local i = 1
  while args[i] do
    local a = args[i]
    if a == '--user' then how = 'user'
    elseif a == '--sys-prefix' then how, prefix = 'prefix', os.getenv('VIRTUAL_ENV') or '/usr/local'
    elseif a == '--prefix' or a == '--name' or a == '--display-name' then
      local v = args[i + 1]
      if not v then error(string.format('ember kernel install: %s needs a value', a), 0) end
      if a == '--prefix' then how, prefix = 'prefix', v
      elseif a == '--name' then name = v
      else display_name = v end
      i = i + 1
    elseif a == '-h' or a == '--help' then
      io.stdout:write('usage: ember kernel install [--user | --prefix PREFIX] [--name NAME] [--display-name TEXT]\n')
      return 0
    else
      error(string.format("ember kernel install: unknown argument '%s' (expected --user, --prefix P, --name N, " ..
        '--display-name T)', a), 0)
    end
    i = i + 1
  end
  if not name:match('^[%w._-]+$') then
    error(string.format("ember kernel install: --name '%s': expected letters, digits, '.', '_' or '-'", name), 0)
  end
  local dir = M.kernels_dir(how, prefix) .. '/' .. name
  mkdirs(dir)
  local path = dir .. '/kernel.json'
  local f, err = io.open(path, 'w')
  if not f then error(string.format("ember kernel install: cannot write '%s': %s", path, err), 0) end
  f:write(message.encode(M.spec(display_name)), '\n')
  f:close()
  io.stdout:write(string.format('installed the kernelspec %s in %s\n', name, dir))
  return 0
end

return M
