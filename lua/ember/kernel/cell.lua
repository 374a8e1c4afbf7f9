-- ember.kernel.cell: a notebook cell as Lua code, and the text questions a front end asks.
--
--   compile(code, name)   the cell as a function: the last statement, when it is an
--                         expression, returns its values (shown as the cell's result), as
--                         the REPL shows a typed expression; a cell ending in ';' shows
--                         nothing. Returns fn, shows_value, or nil and the syntax error.
--   run(fn, wire)         runs it with the JIT off for the cell (as the REPL: an interrupt
--                         is a Lua hook, which compiled code never runs) and returns
--                         true, values (packed) or false, error text, traceback lines,
--                         interrupted
--   is_complete(code)     'complete', 'incomplete' or 'invalid' (the REPL's rule: a syntax
--                         error at '<eof>' means more lines are coming)
--   word_at(code, cursor) the name around a cursor (a.b.c, obj:method), for complete and inspect
--   help_request(code)    the name in a '?name' or 'name?' cell, or nil
local M = {}

local unpack = unpack or table.unpack

-- "return (...)(1, expr)" keeps the frame of a call in expr when it fails, where a plain
-- "return f(x)" would be a tail call (bindings/ember/repl.c does the same).
local function pass_values(_, ...) return ... end

local function split_lines(code)
  local lines = {}
  for line in (code .. '\n'):gmatch('(.-)\r?\n') do lines[#lines + 1] = line end
  return lines
end

function M.compile(code, name)
  local trimmed = code:gsub('%s+$', '')
  if trimmed == '' then return function() end, false end
  local quiet = trimmed:sub(-1) == ';'
  local body = quiet and trimmed:sub(1, -2) or trimmed
  -- the shortest tail of lines that reads as an expression after the lines before it
  local lines = split_lines(body)
  for k = #lines, 1, -1 do
    local head = table.concat(lines, '\n', 1, k - 1)
    local tail = table.concat(lines, '\n', k, #lines)
    if tail:match('%S') then
      local text = (k > 1 and head .. '\n' or '') .. 'return (...)(1, ' .. tail .. '\n)'
      local fn = loadstring(text, name)
      if fn then return fn, not quiet end
    end
  end
  local fn, err = loadstring(code, name)
  if not fn then return nil, err end
  return fn, false
end

local function traceback(err)
  if type(err) ~= 'string' then
    local mt = getmetatable(err)
    if not (type(mt) == 'table' and mt.__tostring) then
      return { message = string.format('(error object is a %s value)', type(err)), trace = debug.traceback('', 2) }
    end
    err = tostring(err)
  end
  return { message = err, trace = debug.traceback('', 2) }
end

-- The traceback lines that belong to the cell: up to the kernel's own xpcall.
local function cell_frames(trace)
  local out = {}
  for line in trace:gmatch('[^\n]+') do
    if line:find("in function 'xpcall'", 1, true) or line:find('ember/kernel/cell.lua', 1, true) then break end
    if not line:match('^%s*$') then out[#out + 1] = line end
  end
  return out
end

function M.run(fn, wire)
  if jit and jit.off then jit.off(fn, true) end
  wire.executing(true)
  local r = { xpcall(fn, traceback, pass_values) }
  wire.executing(false)
  local interrupted = wire.take_interrupt()
  if r[1] then return true, { n = #r - 1, unpack(r, 2) } end
  local e = r[2]
  return false, e.message, cell_frames(e.trace), interrupted
end

-- ------------------------------------------------------------------ text questions

local function incomplete(msg)
  return type(msg) == 'string' and msg:sub(-7) == "'<eof>'"
end

function M.is_complete(code)
  if code:match('^%s*$') then return 'complete' end
  local ok_expr, err_expr = loadstring('return ' .. code)
  if ok_expr then return 'complete' end
  local ok, err = loadstring(code)
  if ok then return 'complete' end
  if incomplete(err) or incomplete(err_expr) then return 'incomplete' end
  return 'invalid'
end

-- Byte offset of the cursor_pos-th character (Jupyter counts Unicode code points).
function M.byte_offset(code, cursor)
  local chars, i, n = 0, 1, #code
  while i <= n and chars < cursor do
    local c = code:byte(i)
    i = i + ((c >= 0xF0 and 4) or (c >= 0xE0 and 3) or (c >= 0xC0 and 2) or 1)
    chars = chars + 1
  end
  return math.min(i - 1, n)
end

-- The name ending at (or around) byte position pos: returns word, start byte (1-based).
function M.word_at(code, pos, around)
  local before = code:sub(1, pos)
  local word = before:match('[%w_.:]*$')
  if around then word = word .. (code:sub(pos + 1):match('^[%w_.:]*') or '') end
  return word, pos - #before:match('[%w_.:]*$') + 1
end

-- The name to explain at a cursor: the word there, else the function whose call the cursor
-- is inside ("ember.randn(3, |").
function M.name_to_inspect(code, pos)
  local word = M.word_at(code, pos, true)
  if word:match('^[%a_]') then return (word:gsub('[.:]$', '')) end
  local depth, i = 0, pos
  while i >= 1 do
    local c = code:sub(i, i)
    if c == ')' then depth = depth + 1
    elseif c == '(' then
      if depth == 0 then
        local name = code:sub(1, i - 1):match('([%a_][%w_.:]*)%s*$')
        return name
      end
      depth = depth - 1
    end
    i = i - 1
  end
  return nil
end

function M.help_request(code)
  local name = code:match('^%s*%?%s*([%a_][%w_.:]*)%s*$') or code:match('^%s*([%a_][%w_.:]*)%s*%?%s*$')
  return name
end

return M
