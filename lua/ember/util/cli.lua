-- ember.util.cli - command-line options for scripts run as `ember script.lua --key value ...`.
--
--   local opt = require('ember.util.cli').options(arg, { epochs = 10, lr = 0.05, resume = false,
--     dir = 'runs/x' }, { positional = 'CHECKPOINT' })
--
-- Every option is named by its default: `--batch-size 64` sets batch_size (dashes or
-- underscores), a number default takes a number, a boolean default is a flag (`--resume`),
-- anything else takes a string. Unknown options, missing or non-numeric values are errors
-- that name the option and the script. With `positional`, one bare argument is accepted and
-- kept as opt[1] (required: its absence is an error saying the usage).
local M = {}

local function flag(key) return '--' .. key:gsub('_', '-') end

function M.options(args, defaults, how)
  how = how or {}
  local script = args[0] or 'the script'
  local o = setmetatable({}, { __index = defaults })
  local i = 1
  while i <= #args do
    local key = args[i]:match('^%-%-([%w_-]+)$')
    key = key and key:gsub('-', '_')
    if key == nil then
      if not how.positional or o[1] ~= nil then
        error(string.format('unexpected argument %s (options: see %s)', args[i], script), 0)
      end
      o[1], i = args[i], i + 1
    elseif defaults[key] == nil then
      error(string.format('unknown option %s (options: see %s)', args[i], script), 0)
    elseif type(defaults[key]) == 'boolean' then
      o[key], i = true, i + 1
    else
      local v = args[i + 1]
      if v ~= nil and type(defaults[key]) == 'number' then
        local n = tonumber(v)
        if n == nil then error(string.format('%s needs a number, got %s', flag(key), v), 0) end
        v = n
      end
      if v == nil then error(flag(key) .. ' needs a value', 0) end
      o[key], i = v, i + 2
    end
  end
  if how.positional and o[1] == nil then
    error(string.format('usage: ember %s %s [options] (see the script)', script, how.positional), 0)
  end
  return o
end

return M
