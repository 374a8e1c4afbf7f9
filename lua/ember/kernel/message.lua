-- ember.kernel.message: JSON as the Jupyter protocol wants it, and base64.
--   encode(v)      JSON text; a table made with array() is always a JSON array (an empty
--                  Lua table is otherwise an object: {}), strings are cleaned to valid
--                  UTF-8 (invalid bytes become U+FFFD, as Python's decoder would refuse them)
--   decode(s)      ember.util.json.decode
--   array(t)       marks t as a JSON array
--   base64(s)      standard base64 text (images in display_data)
local json = require 'ember.util.json'

local M = {}

local array_mt = { __name = 'json array' }
function M.array(t) return setmetatable(t or {}, array_mt) end

-- Length of the valid UTF-8 sequence at byte i of s, or 0 (the checks Python's decoder makes).
local function sequence_length(s, i, n)
  local c = s:byte(i)
  local len = (c >= 0xC2 and c < 0xE0) and 2 or (c >= 0xE0 and c < 0xF0) and 3 or (c >= 0xF0 and c < 0xF5) and 4 or 0
  if len == 0 or i + len - 1 > n then return 0 end
  for k = 1, len - 1 do
    local b = s:byte(i + k)
    if b < 0x80 or b >= 0xC0 then return 0 end
  end
  local b1 = s:byte(i + 1)
  if (c == 0xE0 and b1 < 0xA0) or (c == 0xED and b1 >= 0xA0) or (c == 0xF0 and b1 < 0x90)
      or (c == 0xF4 and b1 >= 0x90) then
    return 0
  end
  return len
end

function M.utf8_clean(s)
  if not s:find('[\128-\255]') then return s end
  local out, i, n, start = {}, 1, #s, 1
  while i <= n do
    local c = s:byte(i)
    if c < 0x80 then
      i = i + 1
    else
      local len = sequence_length(s, i, n)
      if len > 0 then
        i = i + len
      else
        out[#out + 1] = s:sub(start, i - 1)
        out[#out + 1] = '\239\191\189'
        i = i + 1
        start = i
      end
    end
  end
  out[#out + 1] = s:sub(start)
  return table.concat(out)
end

local function is_sequence(t)
  local n = #t
  if n == 0 then return false end
  local count = 0
  for _ in pairs(t) do count = count + 1 end
  return count == n
end

local function encode(v, out, depth)
  local tv = type(v)
  if tv == 'string' then
    out[#out + 1] = json.encode(M.utf8_clean(v))
  elseif tv == 'table' then
    if depth > 100 then error('kernel: a message nests deeper than 100 levels (a cycle?)', 0) end
    if getmetatable(v) == array_mt or is_sequence(v) then
      out[#out + 1] = '['
      for i = 1, #v do
        if i > 1 then out[#out + 1] = ',' end
        encode(v[i], out, depth + 1)
      end
      out[#out + 1] = ']'
    else
      local keys = {}
      for k in pairs(v) do keys[#keys + 1] = tostring(k) end
      table.sort(keys)
      out[#out + 1] = '{'
      for i, k in ipairs(keys) do
        if i > 1 then out[#out + 1] = ',' end
        out[#out + 1] = json.encode(M.utf8_clean(k))
        out[#out + 1] = ':'
        local val = v[k]
        if val == nil then val = v[tonumber(k)] end
        encode(val, out, depth + 1)
      end
      out[#out + 1] = '}'
    end
  elseif tv == 'number' or tv == 'boolean' or v == nil then
    out[#out + 1] = json.encode(v)
  else
    out[#out + 1] = json.encode(M.utf8_clean(tostring(v)))   -- cdata, functions: their text
  end
end

function M.encode(v)
  local out = {}
  encode(v, out, 0)
  return table.concat(out)
end

M.decode = json.decode

local alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'
local enc = {}
for i = 1, 64 do enc[i - 1] = alphabet:sub(i, i) end

function M.base64(s)
  local out, n = {}, #s
  local byte, floor = string.byte, math.floor
  for i = 1, n - 2, 3 do
    local a, b, c = byte(s, i, i + 2)
    local v = a * 65536 + b * 256 + c
    out[#out + 1] = enc[floor(v / 262144)] .. enc[floor(v / 4096) % 64] .. enc[floor(v / 64) % 64] .. enc[v % 64]
  end
  local rest = n % 3
  if rest == 1 then
    local v = byte(s, n) * 65536
    out[#out + 1] = enc[floor(v / 262144)] .. enc[floor(v / 4096) % 64] .. '=='
  elseif rest == 2 then
    local a, b = byte(s, n - 1, n)
    local v = a * 65536 + b * 256
    out[#out + 1] = enc[floor(v / 262144)] .. enc[floor(v / 4096) % 64] .. enc[floor(v / 64) % 64] .. '='
  end
  return table.concat(out)
end

return M
