-- luacheck configuration: `luacheck lua` (ctest runs it as lint/luacheck when luacheck is
-- installed; Debian's package is lua-check).
std = 'luajit'
max_line_length = 120
-- A parameter or loop variable kept for its position or its name says what it is.
unused_args = false
-- The ember host defines _EMBER_HOST; modules read it with rawget. `unpack or table.unpack`
-- reads table.unpack, which LuaJIT lacks unless built with 5.2 compatibility.
read_globals = { '_EMBER_HOST', table = { fields = { 'unpack' } } }
-- `not (x > y)` is how this code says "x <= y, or NaN": keep it.
ignore = { '581' }
exclude_files = { 'build/**' }

-- The busted specs: busted's globals, and those tests/lua/helper.lua defines for them.
files['tests/lua'] = {
  std = '+busted',
  globals = { 'ember', 'test_device', 'on_device', 'test_tmpdir', 'test_write', 'test_read' },
}
