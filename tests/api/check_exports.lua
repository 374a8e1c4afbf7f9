-- check_exports.lua NM LIBRARY HEADER...
-- libember's boundary: the functions and data its dynamic symbol table defines must be
-- exactly the names the given headers declare EM_API (runtime/include/ember/*.h, the
-- public API) or EM_PLUGIN_API (runtime/plugins/plugin_api.h, what the plugins call).
-- Prints every symbol exported without such a declaration and every declared one that is
-- not exported, and exits 1 when there is any.
local nm, library = arg[1], arg[2]
if not nm or not library or not arg[3] then
  io.stderr:write('usage: check_exports.lua NM LIBRARY HEADER...\n')
  os.exit(2)
end

-- Symbols of the toolchain, not of ember: the linker's section bounds, and OpenMP's named
-- critical sections (`#pragma omp critical(name)`), which GCC makes global on purpose so
-- that a process holds one lock per name.
local toolchain = { _init = true, _fini = true, __bss_start = true, _edata = true, _end = true }
local function is_toolchain(name)
  return toolchain[name] or name:find('^%.gomp_critical_user_') ~= nil
end

local declared, where = {}, {}
for i = 3, #arg do
  local f = assert(io.open(arg[i], 'r'))
  local text = f:read('*a')
  f:close()
  text = text:gsub('/%*.-%*/', ' '):gsub('//[^\n]*', ''):gsub('\n%s*#[^\n]*', '\n')
  for marker, decl in text:gmatch('%f[%w_](EM_[%u_]*API)%f[^%w_]([^;]*)') do
    if marker == 'EM_API' or marker == 'EM_PLUGIN_API' then
      -- a function: the identifier before the first '('; data: the last one before ';'
      local head = decl:match('^([^(]*)%(') or decl:gsub('%b[]', '')
      local name = head:match('([%a_][%w_]*)%s*$')
      if not name then
        io.stderr:write(string.format('check_exports: %s: cannot read a name in "%s %s"\n', arg[i], marker,
          decl:gsub('%s+', ' ')))
        os.exit(2)
      end
      declared[name], where[name] = marker, arg[i]:match('([^/]+/[^/]+)$')
    end
  end
end

local exported, n_exported = {}, 0
local p = assert(io.popen(string.format("'%s' -D --defined-only '%s'", nm, library)))
for line in p:lines() do
  local kind, name = line:match('^%x*%s+(%a)%s+(%S+)$')
  if kind and kind ~= 'U' and kind ~= 'w' then
    name = name:gsub('@.*$', '')
    if not is_toolchain(name) then
      exported[name] = true
      n_exported = n_exported + 1
    end
  end
end
p:close()
if n_exported == 0 then
  io.stderr:write(string.format("check_exports: '%s -D --defined-only %s' listed no symbols\n", nm, library))
  os.exit(2)
end

local extra, missing = {}, {}
for name in pairs(exported) do
  if not declared[name] then extra[#extra + 1] = name end
end
for name in pairs(declared) do
  if not exported[name] then missing[#missing + 1] = name end
end
table.sort(extra)
table.sort(missing)
for _, name in ipairs(extra) do
  print(string.format('exported but not declared EM_API or EM_PLUGIN_API: %s (declare it EM_API in ' ..
    'runtime/include/ember/ or EM_PLUGIN_API in runtime/plugins/plugin_api.h, or drop what exports it)', name))
end
for _, name in ipairs(missing) do
  print(string.format('declared %s in %s but not exported by %s: %s', declared[name], where[name], library, name))
end
local n_declared = 0
for _ in pairs(declared) do n_declared = n_declared + 1 end
print(string.format('check_exports: %d symbols exported, %d declared; %d extra, %d missing', n_exported,
  n_declared, #extra, #missing))
os.exit((#extra > 0 or #missing > 0) and 1 or 0)
