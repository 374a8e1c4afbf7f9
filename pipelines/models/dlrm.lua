-- DLRM for the recommendation pipelines: examples/dlrm.lua, with logits out (task: binary
-- takes them: BCE with logits) and the batch's jagged `sparse` field as its input;
-- table_sizes may be one number, for num_tables (default 26) tables.
local here = debug.getinfo(1, 'S').source:match('^@(.*)/[^/]*$') or '.'
local make = dofile(here .. '/../../examples/dlrm.lua')
return function(args)
  local a = {}
  for k, v in pairs(args) do a[k] = v end
  if a.logits == nil then a.logits = true end
  if type(a.table_sizes) == 'number' then   -- one size for num_tables tables (26: Criteo's)
    local t = {}
    for i = 1, a.num_tables or 26 do t[i] = a.table_sizes end
    a.table_sizes, a.num_tables = t, nil
  end
  return make(a)
end
