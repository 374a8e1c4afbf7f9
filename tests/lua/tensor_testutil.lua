-- Shared helpers of the tensor_*_spec.lua files (loaded with dofile, not a spec itself).
local U = {}

-- Compares numbers, booleans and nested tables; numbers within tol (absolute + relative).
local function compare(actual, expected, tol, path)
  if type(expected) == 'table' then
    if type(actual) ~= 'table' then
      return string.format('%s: expected a table, got %s', path, tostring(actual))
    end
    if #actual ~= #expected then
      return string.format('%s: expected %d entries, got %d', path, #expected, #actual)
    end
    for i = 1, #expected do
      local err = compare(actual[i], expected[i], tol, path .. '[' .. i .. ']')
      if err then return err end
    end
    return nil
  end
  if type(expected) == 'number' and type(actual) == 'number' then
    if expected ~= expected then
      if actual ~= actual then return nil end
    elseif expected == actual or math.abs(actual - expected) <= tol * (1 + math.abs(expected)) then
      return nil
    end
  elseif actual == expected then
    return nil
  end
  return string.format('%s: expected %s, got %s', path, tostring(expected), tostring(actual))
end

-- assert that a tensor (or a table) holds the expected values, within tol (default 1e-5).
function U.close(actual, expected, tol)
  if ember.is_tensor(actual) then actual = actual:totable() end
  local err = compare(actual, expected, tol or 1e-5, 'value')
  assert(err == nil, err)
end

-- assert that fn raises an error whose message is `<this spec file>:<line>: <text>...`:
-- the position is the caller's line (in the spec, not in ember's files) and the message
-- starts with `text` (the operation's name first). With plain = false, text is a pattern
-- that must match somewhere after the position.
function U.raises(fn, text, plain)
  local ok, msg = pcall(fn)
  assert(not ok, 'expected an error containing: ' .. text)
  msg = tostring(msg)
  local where, rest = msg:match('^(.-_spec%.lua:%d+): (.*)$')
  assert(where, 'the error is not positioned at the spec\'s line: ' .. msg)
  if plain == false then
    assert(rest:find(text), string.format('expected the message to match %q, got %q', text, rest))
  else
    assert(rest:sub(1, #text) == text, string.format('expected the message to start with %q, got %q', text, rest))
  end
  return rest
end

return U
