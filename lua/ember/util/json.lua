-- ember.util.json: JSON for metrics lines, final reports and checkpoint metadata.
--
--   json.encode({epoch = 3, loss = 0.25})   --> {"epoch":3,"loss":0.25}
--   json.decode('{"a":[1,2]}')              --> {a = {1, 2}}
--
-- Objects are written with sorted keys (stable, diffable lines), or in the order given by
-- encode(t, {order = {...}}) for the keys it lists, the rest sorted after them. Numbers are
-- written with the fewest digits that read back to the same double, so a number survives
-- a round trip exactly (checkpoints rely on it); NaN and infinities become null. A table is
-- an array when its keys are exactly 1..n (the empty table is written as {}). int64/uint64
-- cdata numbers are written as integers.
local json = {}

local function encode_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    local named = { ['"'] = '\\"', ['\\'] = '\\\\', ['\n'] = '\\n', ['\r'] = '\\r', ['\t'] = '\\t',
      ['\b'] = '\\b', ['\f'] = '\\f' }
    return named[c] or string.format('\\u%04x', c:byte())
  end) .. '"'
end

local function encode_number(x)
  if x ~= x or x == math.huge or x == -math.huge then return 'null' end
  if x == math.floor(x) and math.abs(x) < 2 ^ 53 then return string.format('%d', x) end
  for digits = 15, 17 do
    local s = string.format('%.' .. digits .. 'g', x)
    if tonumber(s) == x then return s end
  end
  return string.format('%.17g', x)
end
json.encode_number = encode_number

local function is_array(t)
  local n = #t
  if n == 0 then return false end
  local count = 0
  for _ in pairs(t) do count = count + 1 end
  return count == n
end

local function encode(x, order, depth)
  local tx = type(x)
  if x == nil then return 'null' end
  if tx == 'boolean' then return tostring(x) end
  if tx == 'number' then return encode_number(x) end
  if tx == 'string' then return encode_string(x) end
  if tx == 'cdata' then
    local s = tostring(x):match('^(%-?%d+)U?LL$')
    if s then return s end
    error('json.encode: cannot encode ' .. tostring(x), 0)
  end
  if tx ~= 'table' then
    -- the YAML null sentinel prints as "null" through its __tostring
    local mt = getmetatable(x)
    if mt and mt.__tostring and tostring(x) == 'null' then return 'null' end
    error('json.encode: cannot encode a ' .. tx, 0)
  end
  if depth > 100 then error('json.encode: nesting deeper than 100 levels (a cycle?)', 0) end
  local mt = getmetatable(x)
  if mt and mt.__tostring and tostring(x) == 'null' then return 'null' end
  local parts = {}
  if is_array(x) then
    for i = 1, #x do parts[i] = encode(x[i], nil, depth + 1) end
    return '[' .. table.concat(parts, ',') .. ']'
  end
  local keys, listed = {}, {}
  for _, k in ipairs(order or {}) do
    if x[k] ~= nil then
      keys[#keys + 1] = k
      listed[k] = true
    end
  end
  local rest = {}
  for k in pairs(x) do
    if type(k) ~= 'string' and type(k) ~= 'number' then
      error('json.encode: object keys must be strings or numbers, got a ' .. type(k), 0)
    end
    if not listed[k] then rest[#rest + 1] = tostring(k) end
  end
  table.sort(rest)
  for _, k in ipairs(rest) do keys[#keys + 1] = k end
  for i, k in ipairs(keys) do
    local v = x[k]
    if v == nil then v = x[tonumber(k)] end
    parts[i] = encode_string(k) .. ':' .. encode(v, nil, depth + 1)
  end
  return '{' .. table.concat(parts, ',') .. '}'
end

function json.encode(x, opts) return encode(x, opts and opts.order, 0) end

-- ---------------------------------------------------------------- decode
local escapes = { ['"'] = '"', ['\\'] = '\\', ['/'] = '/', b = '\b', f = '\f', n = '\n', r = '\r', t = '\t' }

local function utf8_char(c)
  if c < 0x80 then return string.char(c) end
  if c < 0x800 then return string.char(0xC0 + math.floor(c / 64), 0x80 + c % 64) end
  if c < 0x10000 then
    return string.char(0xE0 + math.floor(c / 4096), 0x80 + math.floor(c / 64) % 64, 0x80 + c % 64)
  end
  return string.char(0xF0 + math.floor(c / 262144), 0x80 + math.floor(c / 4096) % 64, 0x80 + math.floor(c / 64) % 64,
    0x80 + c % 64)
end

local function decode_error(s, pos, what)
  error(string.format('json.decode: %s at byte %d', what, pos), 0)
end

local decode_value

local function skip(s, pos) return s:find('[^ \t\r\n]', pos) or #s + 1 end

local function decode_string(s, pos)
  local out, i = {}, pos + 1
  while true do
    local j = s:find('["\\]', i)
    if not j then decode_error(s, pos, 'unterminated string') end
    out[#out + 1] = s:sub(i, j - 1)
    if s:sub(j, j) == '"' then return table.concat(out), j + 1 end
    local e = s:sub(j + 1, j + 1)
    if e == 'u' then
      local hex = s:sub(j + 2, j + 5)
      if not hex:match('^%x%x%x%x$') then decode_error(s, j, 'bad \\u escape') end
      local c = tonumber(hex, 16)
      local next_at = j + 6
      if c >= 0xD800 and c < 0xDC00 and s:sub(j + 6, j + 7) == '\\u' then   -- surrogate pair
        local lo = tonumber(s:sub(j + 8, j + 11), 16)
        if lo and lo >= 0xDC00 and lo < 0xE000 then
          c = 0x10000 + (c - 0xD800) * 1024 + (lo - 0xDC00)
          next_at = j + 12
        end
      end
      out[#out + 1] = utf8_char(c)
      i = next_at
    elseif escapes[e] then
      out[#out + 1] = escapes[e]
      i = j + 2
    else
      decode_error(s, j, 'bad escape')
    end
  end
end

function decode_value(s, pos, depth)
  if depth > 200 then decode_error(s, pos, 'nesting too deep') end
  pos = skip(s, pos)
  local c = s:sub(pos, pos)
  if c == '{' then
    local obj = {}
    pos = skip(s, pos + 1)
    if s:sub(pos, pos) == '}' then return obj, pos + 1 end
    while true do
      if s:sub(pos, pos) ~= '"' then decode_error(s, pos, 'expected a string key') end
      local k
      k, pos = decode_string(s, pos)
      pos = skip(s, pos)
      if s:sub(pos, pos) ~= ':' then decode_error(s, pos, "expected ':'") end
      obj[k], pos = decode_value(s, pos + 1, depth + 1)
      pos = skip(s, pos)
      local d = s:sub(pos, pos)
      if d == '}' then return obj, pos + 1 end
      if d ~= ',' then decode_error(s, pos, "expected ',' or '}'") end
      pos = skip(s, pos + 1)
    end
  elseif c == '[' then
    local arr = {}
    pos = skip(s, pos + 1)
    if s:sub(pos, pos) == ']' then return arr, pos + 1 end
    while true do
      arr[#arr + 1], pos = decode_value(s, pos, depth + 1)
      pos = skip(s, pos)
      local d = s:sub(pos, pos)
      if d == ']' then return arr, pos + 1 end
      if d ~= ',' then decode_error(s, pos, "expected ',' or ']'") end
      pos = pos + 1
    end
  elseif c == '"' then
    return decode_string(s, pos)
  elseif s:sub(pos, pos + 3) == 'true' then
    return true, pos + 4
  elseif s:sub(pos, pos + 4) == 'false' then
    return false, pos + 5
  elseif s:sub(pos, pos + 3) == 'null' then
    return nil, pos + 4
  end
  local num = s:match('^-?%d+%.?%d*[eE]?[-+]?%d*', pos)
  if num and num ~= '' and tonumber(num) then return tonumber(num), pos + #num end
  decode_error(s, pos, 'unexpected ' .. (c == '' and 'end of text' or ("'" .. c .. "'")))
end

function json.decode(s)
  if type(s) ~= 'string' then error('json.decode: expected a string, got a ' .. type(s), 2) end
  local v, pos = decode_value(s, 1, 0)
  pos = skip(s, pos)
  if pos <= #s then decode_error(s, pos, 'trailing text') end
  return v
end

return json
