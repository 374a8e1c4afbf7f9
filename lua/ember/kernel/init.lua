-- ember.kernel: `ember kernel`, a Jupyter kernel (messaging protocol 5.3) for Lua with ember.
--
--   ember kernel -f CONNECTION.json       what Jupyter runs (the kernelspec's argv)
--   ember kernel install [--user | --prefix P] [--name N] [--display-name TEXT]
--
-- The wire (sockets, signatures, heartbeat, captured output, interrupts, the parent watch)
-- is C: bindings/ember/kernel_wire.c. This file is the protocol's contents: one message at
-- a time from shell and control, each answered between a busy and an idle status.
--   execute_request     a cell (ember.kernel.cell): execute_input, stream output, execute_result
--                       (ember.display.bundle: text, HTML tables, pictures), error with a
--                       traceback; a failed cell aborts the cells queued behind it
--                       (stop_on_error); io.read asks the front end (input_request)
--   complete_request    ember.repl.complete on the name before the cursor
--   inspect_request     ember.help.describe on the name at the cursor
--   is_complete_request the REPL's multi-line rule
--   kernel_info, history (empty), comm_info (none), interrupt, shutdown (restart: the
--   client starts a new process)
local message = require 'ember.kernel.message'
local cell = require 'ember.kernel.cell'

local M = {}
local array, encode, decode = message.array, message.encode, message.decode

local Kernel = {}
Kernel.__index = Kernel

function Kernel:send(channel, msg_type, parent, content, idents)
  self.wire.send(channel, msg_type, parent or '{}', '{}', encode(content), idents)
end

function Kernel:publish(msg_type, content, parent)
  self:send('iopub', msg_type, parent or self.parent, content)
end

-- ------------------------------------------------------------------ kernel_info

local function gpu_info()
  local ok, info = pcall(function()
    local ember = require 'ember'
    local out = { devices = {} }
    local n = ember.cuda.device_count()
    for i = 0, n - 1 do
      local p = ember.cuda.get_device_properties(i)
      out.devices[#out.devices + 1] = { name = p.name, memory_gib = p.total_memory / 2 ^ 30,
        compute_capability = p.major and string.format('%d.%d', p.major, p.minor) or nil }
    end
    if n == 0 then out.reason = ember.cuda.unavailable_reason() end
    local vok, v = pcall(ember.cuda.versions)
    if vok then out.versions = v end
    return out
  end)
  return ok and info or { devices = {}, reason = tostring(info) }
end

-- What `ember info` and the REPL banner say: version, features, threads, devices.
function M.info()
  local ember = require 'ember'
  local gpu = gpu_info()
  local devices
  if #gpu.devices > 0 then
    local d = gpu.devices[1]
    devices = string.format('cpu, cuda x%d (%s, %.0f GiB)', #gpu.devices, d.name, d.memory_gib)
  else
    devices = 'cpu (cuda: none)'
  end
  local versions = {}
  for _, k in ipairs { 'driver', 'runtime', 'cublas', 'cudnn', 'nccl' } do
    if gpu.versions and gpu.versions[k] then versions[#versions + 1] = k .. ' ' .. tostring(gpu.versions[k]) end
  end
  local threads = tonumber(ember.C.em_get_num_threads())
  local features = require('ffi').string(ember.C.em_build_features())
  local banner = string.format('ember %s | %s | threads: %d | devices: %s', ember._VERSION, jit and jit.version or
    _VERSION, threads, devices)
  if #versions > 0 then banner = banner .. '\ncuda versions: ' .. table.concat(versions, ', ') end
  banner = banner .. '\nThe library is the global `ember`. Tab completes, Shift-Tab (or ?name) explains a name.'
  return { version = ember._VERSION, features = features, threads = threads, devices = devices, gpus = gpu.devices,
    cuda_versions = gpu.versions, cuda_unavailable = gpu.reason, banner = banner }
end

local handlers = {}

function handlers.kernel_info_request(self)
  self.info = self.info or M.info()
  local info = self.info
  return {
    status = 'ok', protocol_version = '5.3', implementation = 'ember', implementation_version = info.version,
    language_info = { name = 'lua', version = jit and jit.version:match('[%d.]+') or '5.1', mimetype = 'text/x-lua',
      file_extension = '.lua', pygments_lexer = 'lua', codemirror_mode = 'lua' },
    banner = info.banner, help_links = array(),
    ember = { version = info.version, features = info.features, threads = info.threads, devices = info.devices,
      gpus = array(info.gpus), cuda_versions = info.cuda_versions, cuda_unavailable = info.cuda_unavailable },
  }
end

-- ------------------------------------------------------------------ execute

-- io.read in a cell asks the front end (input_request on stdin) and waits for its reply;
-- other messages arriving meanwhile wait their turn. An interrupt ends the wait (the hook
-- runs here, as this loop is interpreted).
function Kernel:input(prompt, password)
  if not self.allow_stdin then
    error('io.read: this front end does not take input (allow_stdin is false)', 3)
  end
  self:send('stdin', 'input_request', self.parent, { prompt = prompt or '', password = password or false },
    self.idents)
  while true do
    local msg = self.wire.recv(100)
    if msg then
      if msg.channel == 'parent_died' then self.done = true; error('the front end is gone', 0) end
      local h = msg.channel == 'stdin' and decode(msg.header)
      if h and h.msg_type == 'input_reply' then return (decode(msg.content) or {}).value end
      self.pending[#self.pending + 1] = msg
    end
  end
end
if jit and jit.off then jit.off(Kernel.input) end

local function with_stdin(self, fn)
  local read = io.read
  io.read = function(fmt)   -- luacheck: ignore 122
    local line = self:input('')
    if line and (fmt == '*n' or fmt == 'n') then return tonumber(line) end
    return line
  end
  local results = { pcall(fn) }
  io.read = read   -- luacheck: ignore 122
  if not results[1] then error(results[2], 0) end
  return unpack(results, 2)
end

local function error_content(ename, evalue, frames)
  local tb = { ename .. ': ' .. evalue }
  for _, l in ipairs(frames or {}) do tb[#tb + 1] = l end
  return { status = 'error', ename = ename, evalue = evalue, traceback = array(tb) }
end

-- Runs one cell; returns the reply's content (published output has gone out already).
function Kernel:run_cell(code, count, silent)
  local name = string.format('=In[%d]', count)
  local help_name = cell.help_request(code)
  if help_name then
    local text = require('ember.help').describe(help_name)
    if text then
      io.write(text, '\n')
    else
      io.write(string.format('%s: nothing by that name\n', help_name))
    end
    return { status = 'ok' }
  end
  local fn, err = cell.compile(code, name)
  local shows = err   -- compile returns fn, shows_value or nil, message
  if not fn then
    local content = error_content('SyntaxError', err, {})
    if not silent then self:publish('error', content) end
    return content
  end
  local ok, values, frames, interrupted = cell.run(fn, self.wire)
  if not ok then
    local content = error_content(interrupted and 'Interrupted' or 'LuaError', values, frames)
    if not silent then self:publish('error', content) end
    return content
  end
  if shows and values.n > 0 and not silent and not (values.n == 1 and values[1] == nil) then
    local bundle_ok, bundle = pcall(require('ember.display').bundle, unpack(values, 1, values.n))
    if not bundle_ok then bundle = { ['text/plain'] = 'error while showing the result: ' .. tostring(bundle) } end
    self:publish('execute_result', { execution_count = count, data = bundle, metadata = {} })
  end
  return { status = 'ok' }
end

-- user_expressions: each evaluated after the cell, as a mime bundle or an error.
local function user_expressions(exprs)
  local out = {}
  for key, expr in pairs(type(exprs) == 'table' and exprs or {}) do
    local fn, err = loadstring('return ' .. tostring(expr), '=user_expression')
    local ok, v = false, err
    if fn then ok, v = pcall(fn) end
    if ok then
      out[key] = { status = 'ok', data = require('ember.display').bundle(v), metadata = {} }
    else
      out[key] = error_content('LuaError', tostring(v), {})
    end
  end
  return out
end

-- Cells queued behind a failed one are not run (Jupyter's stop_on_error).
function Kernel:abort_queued()
  while true do
    local msg = self.wire.recv(0)
    if not msg then break end
    local ok, h = pcall(decode, msg.header or '')
    if msg.channel == 'shell' and ok and type(h) == 'table' and h.msg_type == 'execute_request' then
      self:publish('status', { execution_state = 'busy' }, msg.header)
      self:send('shell', 'execute_reply', msg.header, { status = 'aborted', execution_count = self.count },
        msg.idents)
      self:publish('status', { execution_state = 'idle' }, msg.header)
    else
      self.pending[#self.pending + 1] = msg
    end
  end
end

function handlers.execute_request(self, msg, content)
  local code = type(content.code) == 'string' and content.code or ''
  local silent = content.silent == true
  if not silent and content.store_history ~= false then self.count = self.count + 1 end
  local count = self.count
  if not silent then self:publish('execute_input', { code = code, execution_count = count }) end
  local display = require 'ember.display'
  display.publisher = function(bundle, metadata)
    self:publish('display_data', { data = bundle, metadata = metadata or {}, transient = {} })
  end
  self.allow_stdin, self.idents = content.allow_stdin == true, msg.idents
  local ok, reply = pcall(with_stdin, self, function() return self:run_cell(code, count, silent) end)
  display.publisher = nil
  io.stdout:flush()
  if not ok then reply = error_content('KernelError', tostring(reply), {}) end
  reply.execution_count = count
  if reply.status == 'ok' then
    reply.user_expressions = user_expressions(content.user_expressions)
    reply.payload = array()
  end
  self.abort = reply.status == 'error' and content.stop_on_error ~= false
  return reply
end

-- ------------------------------------------------------------------ text questions

function handlers.complete_request(self, msg, content)
  local code = type(content.code) == 'string' and content.code or ''
  local cursor = tonumber(content.cursor_pos) or #code
  local pos = cell.byte_offset(code, cursor)
  local word = cell.word_at(code, pos)
  local ok, matches = pcall(require('ember.repl').complete, word)
  if not ok then matches = {} end
  return { status = 'ok', matches = array(matches), cursor_start = cursor - #word, cursor_end = cursor, metadata = {} }
end

function handlers.inspect_request(self, msg, content)
  local code = type(content.code) == 'string' and content.code or ''
  local cursor = tonumber(content.cursor_pos) or #code
  local name = cell.name_to_inspect(code, cell.byte_offset(code, cursor))
  local ok, text = false, nil
  if name then ok, text = pcall(require('ember.help').describe, name) end
  if ok and text then return { status = 'ok', found = true, data = { ['text/plain'] = text }, metadata = {} } end
  return { status = 'ok', found = false, data = {}, metadata = {} }
end

function handlers.is_complete_request(self, msg, content)
  local status = cell.is_complete(type(content.code) == 'string' and content.code or '')
  return status == 'incomplete' and { status = status, indent = '  ' } or { status = status }
end

function handlers.history_request() return { status = 'ok', history = array() } end
function handlers.comm_info_request() return { status = 'ok', comms = {} } end
function handlers.interrupt_request() return { status = 'ok' } end   -- the wire sent SIGINT already

function handlers.shutdown_request(self, msg, content)
  self.done = true
  local reply = { status = 'ok', restart = content.restart == true }
  self:publish('shutdown_reply', reply)
  return reply
end

-- ------------------------------------------------------------------ the loop

local NO_REPLY = { comm_open = true, comm_msg = true, comm_close = true, input_reply = true }

function Kernel:handle(msg)
  local ok, header = pcall(decode, msg.header or '')
  if not ok or type(header) ~= 'table' or type(header.msg_type) ~= 'string' then
    self.wire.log('ember kernel: a message without a readable header on ' .. tostring(msg.channel))
    return
  end
  local cok, content = pcall(decode, msg.content or '{}')
  if not cok or type(content) ~= 'table' then content = {} end
  local t = header.msg_type
  local h = handlers[t]
  if not h then
    if not NO_REPLY[t] then self.wire.log('ember kernel: unknown message type ' .. t .. ' on ' .. msg.channel) end
    return
  end
  self.parent = msg.header
  self.wire.set_parent(msg.header)
  self:publish('status', { execution_state = 'busy' })
  local hok, reply = pcall(h, self, msg, content, header)
  if not hok then reply = error_content('KernelError', tostring(reply), {}) end
  if self.abort then   -- before the reply: a request sent after seeing it is never aborted
    self.abort = nil
    self:abort_queued()
  end
  self:send(msg.channel, (t:gsub('_request$', '_reply')), msg.header, reply, msg.idents)
  self:publish('status', { execution_state = 'idle' })
end

function Kernel:run()
  self:publish('status', { execution_state = 'starting' }, '{}')
  while not self.done do
    local msg = table.remove(self.pending, 1) or self.wire.recv(-1)
    if msg and msg.channel == 'parent_died' then break end
    if msg then
      local ok, err = pcall(self.handle, self, msg)   -- a late interrupt never ends the kernel
      if not ok then self.wire.log('ember kernel: ' .. tostring(err)) end
    end
  end
end

-- ------------------------------------------------------------------ command line

local usage = [[
usage: ember kernel -f CONNECTION.json
       ember kernel install [--user | --prefix PREFIX] [--name NAME] [--display-name TEXT]

A Jupyter kernel: Jupyter starts it with the connection file it wrote. `install` writes the
kernelspec (kernel.json) so that Jupyter lists ember: by default system-wide
(/usr/local/share/jupyter/kernels/ember), --user for this user
($JUPYTER_DATA_DIR or ~/.local/share/jupyter), --prefix into PREFIX/share/jupyter.
]]

local function read_connection(path)
  local f, err = io.open(path, 'r')
  if not f then error(string.format("ember kernel: cannot read the connection file '%s': %s", path, err), 0) end
  local text = f:read('*a')
  f:close()
  local ok, conn = pcall(decode, text)
  if not ok or type(conn) ~= 'table' then
    error(string.format("ember kernel: '%s' is not a JSON connection file: %s", path, tostring(conn)), 0)
  end
  for _, k in ipairs { 'shell_port', 'iopub_port', 'stdin_port', 'control_port', 'hb_port' } do
    if type(conn[k]) ~= 'number' then
      error(string.format("ember kernel: '%s' has no %s (a port number)", path, k), 0)
    end
  end
  return conn
end

function M.serve(conn)
  local ok, wire = pcall(require, 'ember_kernel_wire')
  if not ok then
    error('ember kernel: this ember was built without the kernel (it needs ZeroMQ and libcrypto: ' ..
      'libzmq3-dev, libssl-dev)', 0)
  end
  wire.start(conn)
  _G.ember = require 'ember'
  local k = setmetatable({ wire = wire, count = 0, pending = {}, parent = '{}' }, Kernel)
  local run_ok, err = pcall(k.run, k)
  wire.stop()
  if not run_ok then error(err, 0) end
  return 0
end

function M.main(args)
  local first = args[1]
  if first == nil or first == '-h' or first == '--help' then
    io.stdout:write(usage)
    return first and 0 or 2
  end
  if first == 'install' then
    local ok, err = pcall(require('ember.kernel.install').main, { unpack(args, 2) })
    if not ok then
      io.stderr:write(tostring(err), '\n')
      return 2
    end
    return err
  end
  local path
  if first == '-f' then path = args[2]
  elseif first:match('^%-%-f=') then path = first:sub(5)
  end
  if not path or args[path == args[2] and 3 or 2] then
    io.stderr:write("ember kernel: expected -f CONNECTION.json or 'install' (see ember kernel --help)\n")
    return 2
  end
  local ok, err = pcall(function() return M.serve(read_connection(path)) end)
  if not ok then
    io.stderr:write(tostring(err), '\n')
    return 1
  end
  return 0
end

return M
