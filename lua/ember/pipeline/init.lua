-- ember.pipeline: YAML pipeline files, `ember run pipelines/NAME.yaml key.path=value ...`.
--
--   local pipeline = require 'ember.pipeline'
--   os.exit(pipeline.main({'pipelines/fashion_mnist_mlp.yaml', 'epochs=2'}))
--   local cfg = pipeline.load('pipelines/x.yaml', {'optim.lr=0.1'})  -- checked config
--   local result = pipeline.run(cfg)                                  -- the job's result table
--
-- A file names its job kind in a top-level `job:` key; the kind's module gives the schema
-- of its keys and runs the job. Sections are top-level keys any job may carry
-- (`distributed:`, later): the section's module gives its schema and a setup step run before
-- the job. Registering a job kind or a section is one entry in the tables below: a module
-- name whose module returns
--   job:     {schema = {key = schema, ...}, run = function(cfg, ctx) return result end,
--             doc = 'one line'}
--   section: {schema = schema, setup = function(section_cfg, cfg, ctx) end, doc = '...'}
-- The job's result is printed as one JSON line on stdout (keys in the module's
-- result_order first, if it has one).
-- ctx carries what the host provides: ctx.file, ctx.stdout/ctx.stderr (file handles),
-- ctx.log(fmt, ...) for plain progress lines on stderr, and what sections set up. The
-- train job reads ctx.rank and ctx.world_size (data shards; only rank 0 writes files and the
-- result) and ctx.wrap_model(model) (e.g. DistributedDataParallel), as a `distributed:`
-- section would set them. A job returning nil prints nothing (ranks other than 0).
--
-- Keys every job has: job, seed (default 0), device ('cpu', 'cuda', 'cuda:N' or 'auto',
-- which picks cuda when a device is present), threads (default: ember's default).
--
-- Overrides: `key.path=value`, the value read with YAML's scalar rules ("0.1" is a number,
-- "true" a boolean, "[1, 2]" a list, "null" or nothing clears the key so its default
-- applies); list items are addressed by position (model.3.linear=[784, 64]). An override is
-- checked like the file, and its errors name it:
--   "pipelines/x.yaml: override optim.lr=fast: optim.lr: expected a number > 0, got 'fast'".
local S = require 'ember.util.schema'
local json = require 'ember.util.json'

local pipeline = {}

pipeline.jobs = {
  train = 'ember.pipeline.train',
  pagerank = 'ember.pipeline.pagerank',
  serve = 'ember.serve.job',
}
pipeline.sections = {
  distributed = 'ember.pipeline.distributed',
}

pipeline.schema = S
pipeline.json = json

-- ---------------------------------------------------------------- YAML
local yaml_module
local function yaml()
  if not yaml_module then
    local ok, m = pcall(require, 'ember_yaml')
    if not ok then
      error(setmetatable({ message = 'ember run: the YAML reader (ember_yaml) is not available in this build: ' ..
        'install libyaml-dev and rebuild (' .. tostring(m) .. ')' }, S.Error), 0)
    end
    yaml_module = m
    S.null = m.null
  end
  return yaml_module
end

local function config_error(msg) error(setmetatable({ message = msg }, S.Error), 0) end

-- ---------------------------------------------------------------- overrides
-- Splits "a.b.3.c" into segments (numbers for list positions).
local function split_path(key)
  local segs = {}
  for seg in (key .. '.'):gmatch('([^.]*)%.') do
    if seg == '' then return nil end
    segs[#segs + 1] = seg:match('^%d+$') and tonumber(seg) or seg
  end
  return segs
end

-- Applies one "key.path=value" to doc; records where the value came from.
local function apply_override(file, doc, lines, origins, text)
  local key, value = text:match('^([^=]+)=(.*)$')
  if not key then
    config_error(string.format("%s: '%s' is not an override: expected key.path=value (e.g. optim.lr=0.1)",
      file, text))
  end
  local segs = split_path(key)
  if not segs then
    config_error(string.format("%s: override '%s': '%s' is not a key path such as optim.lr", file, text, key))
  end
  local v
  if value == '' then
    v = S.null
  else
    local ok, parsed = pcall(yaml().load, value, 'value')
    if not ok then config_error(string.format("%s: override '%s': cannot read the value: %s", file, text, parsed)) end
    v = parsed
  end
  local origin = file .. ': override ' .. text
  local node, path = doc, ''
  -- A number addresses a list item, a name a mapping key ("2" in a mapping is the key "2").
  local function key_in(container, seg, at)
    if type(seg) == 'number' and next(container) ~= nil and not S.is_list(container) then return tostring(seg) end
    if type(seg) == 'string' and next(container) ~= nil and S.is_list(container) then
      config_error(string.format('%s: %s is a list: address its items by position (%s.1, %s.2, ...)', origin,
        at ~= '' and at or '(top level)', at, at))
    end
    return seg
  end
  for i = 1, #segs - 1 do
    local seg = key_in(node, segs[i], path)
    path = S.join(path, seg)
    local nxt = node[seg]
    if nxt == nil or nxt == S.null then
      if type(seg) == 'number' and seg > #node + 1 then
        config_error(string.format("%s: %s: there is no item %d in the list (it has %d)", origin, path, seg, #node))
      end
      nxt = {}
      node[seg] = nxt
      origins[path] = origins[path] or origin
    elseif type(nxt) ~= 'table' then
      config_error(string.format('%s: %s is %s, not a mapping or list, so it has no key %s', origin, path, S.got(nxt),
        tostring(segs[i + 1])))
    end
    node = nxt
  end
  local last = key_in(node, segs[#segs], path)
  if type(last) == 'number' and S.is_list(node) and last > #node + 1 then
    config_error(string.format("%s: %s: there is no item %d in the list (it has %d)", origin, key, last, #node))
  end
  node[last] = v
  origins[table.concat(segs, '.')] = origin
  -- values under the overridden key are the override's now, not the file's
  local prefix = table.concat(segs, '.')
  for p in pairs(lines) do
    if p == prefix or p:sub(1, #prefix + 1) == prefix .. '.' then lines[p] = nil end
  end
end

-- ---------------------------------------------------------------- schema of a file
local common = {
  job = nil,   -- filled in per file
  seed = S.integer { min = 0, default = 0, doc = 'the global generator seed (model initialisation)' },
  device = S.string { default = 'cpu', pattern = '^[%w:]+$',
    check = function(v)
      if v == 'auto' or v == 'cpu' or v == 'cuda' or v:match('^cuda:%d+$') then return nil end
      return string.format("expected cpu, cuda, cuda:N or auto, got '%s'", v)
    end },
  threads = S.integer { min = 1, optional = true, doc = 'threads for ember and OpenBLAS' },
}

local function job_names()
  local names = {}
  for k in pairs(pipeline.jobs) do names[#names + 1] = k end
  table.sort(names)
  return names
end

local loaded_modules = {}
local function module_of(name)
  local m = loaded_modules[name]
  if not m then
    m = require(name)
    loaded_modules[name] = m
  end
  return m
end

-- The record schema for a file of job kind `job`.
function pipeline.file_schema(job)
  local fields = {}
  for k, v in pairs(common) do fields[k] = v end
  fields.job = S.enum(job_names())
  for k, v in pairs(module_of(pipeline.jobs[job]).schema) do fields[k] = v end
  for name, mod in pairs(pipeline.sections) do
    local sec = module_of(mod)
    if not sec.jobs or sec.jobs[job] then fields[name] = sec.schema end
  end
  return S.record(fields)
end

-- ---------------------------------------------------------------- load
-- load(path, overrides) -> cfg (checked, with defaults), ctx (file, lines, origins).
function pipeline.load(path, overrides)
  if type(path) ~= 'string' then config_error('ember run: expected the path of a pipeline file') end
  local kind = S.path_kind(path)
  if kind ~= 'file' then
    config_error(string.format("ember run: cannot read the pipeline '%s': %s", path,
      kind == nil and 'no such file' or 'it is a directory'))
  end
  local ok, doc, lines = pcall(yaml().load_file, path)
  if not ok then config_error(tostring(doc)) end
  if not S.is_mapping(doc) then
    config_error(string.format('%s:%d: the top level must be a mapping of keys (job:, model:, ...), got %s', path,
      lines['(root)'] or 1, S.got(doc)))
  end
  -- base_dir: files the pipeline names (model, loss, data) are found relative to it
  local ctx = { file = path, lines = lines, origins = {}, base_dir = S.dirname(path) }
  for _, text in ipairs(overrides or {}) do apply_override(path, doc, lines, ctx.origins, text) end
  local job = doc.job
  if job == nil or job == S.null then
    S.fail(ctx, 'job', 'missing (expected one of ' .. table.concat(job_names(), ', ') .. ')')
  end
  if type(job) ~= 'string' or not pipeline.jobs[job] then
    S.fail(ctx, 'job', string.format('expected one of %s, got %s', table.concat(job_names(), ', '), S.got(job)))
  end
  local cfg = S.validate(pipeline.file_schema(job), doc, ctx)
  return cfg, ctx
end

-- ---------------------------------------------------------------- run
local function resolve_device(cfg, ctx)
  local C = require('ember').C
  local cuda = C.em_device_count(C.EM_CUDA)
  if cfg.device == 'auto' then return cuda > 0 and 'cuda' or 'cpu' end
  if cfg.device ~= 'cpu' then
    local index = tonumber(cfg.device:match(':(%d+)$') or 0)
    if cuda <= index then
      S.fail(ctx, 'device', string.format("'%s' requested, but %s", cfg.device,
        cuda == 0 and 'no CUDA device is available (use cpu or auto)' or (cuda .. ' CUDA device(s) are present')))
    end
  end
  return cfg.device
end

-- run(cfg [, ctx]) -> the job's result table.
function pipeline.run(cfg, ctx)
  ctx = ctx or {}
  ctx.stdout = ctx.stdout or io.stdout
  ctx.stderr = ctx.stderr or io.stderr
  ctx.log = ctx.log or function(fmt, ...)
    ctx.stderr:write(string.format(fmt, ...), '\n')
    ctx.stderr:flush()
  end
  local ember = require 'ember'
  if cfg.threads then ember.C.em_set_num_threads(cfg.threads) end
  cfg.device = resolve_device(cfg, ctx)
  ember.manual_seed(cfg.seed)
  for name, mod in pairs(pipeline.sections) do
    if cfg[name] ~= nil then
      local sec = module_of(mod)
      if sec.setup then sec.setup(cfg[name], cfg, ctx) end
    end
  end
  return module_of(pipeline.jobs[cfg.job]).run(cfg, ctx)
end

local usage = [[
usage: ember run PIPELINE.yaml [key.path=value ...] [--check]

Runs the job a YAML pipeline file describes (job: %s). key.path=value overrides
a key of the file (values read as YAML: 0.1, true, [1, 2], null); --check validates the
file and the overrides and prints the resulting configuration as JSON without running.
The job's result is printed as one JSON line on stdout; progress goes to stderr.
]]

-- main(argv [, opts]) -> exit status: 0 done, 1 the job failed, 2 a bad command line or
-- pipeline. opts.job: the only job kind accepted (`ember serve` takes serve jobs only).
function pipeline.main(argv, opts)
  argv = argv or {}
  opts = opts or {}
  local path, overrides, check_only = nil, {}, false
  for _, a in ipairs(argv) do
    if a == '-h' or a == '--help' then
      io.stdout:write(string.format(usage, table.concat(job_names(), ', ')))
      return 0
    elseif a == '--check' then
      check_only = true
    elseif a:sub(1, 1) == '-' and not a:find('=') then
      io.stderr:write(string.format("ember run: unknown option '%s' (see ember run --help)\n", a))
      return 2
    elseif not path and not a:find('=') then
      path = a
    else
      overrides[#overrides + 1] = a
    end
  end
  if not path then
    io.stderr:write('ember run: expected a pipeline file (see ember run --help)\n')
    return 2
  end
  local ok, cfg, ctx = pcall(pipeline.load, path, overrides)
  if not ok then
    io.stderr:write(S.is_error(cfg) and cfg.message or ('ember run: ' .. tostring(cfg)), '\n')
    return 2
  end
  if opts.job and cfg.job ~= opts.job then
    io.stderr:write(string.format("%s: %s is a '%s' job; expected job: %s (run it with: ember run %s)\n",
      opts.command or 'ember', path, cfg.job, opts.job, path))
    return 2
  end
  if check_only then
    io.stdout:write(json.encode(cfg), '\n')
    return 0
  end
  local result
  ok, result = xpcall(pipeline.run, function(e)
    if S.is_error(e) then return e end
    return debug.traceback(tostring(e), 2)
  end, cfg, ctx)
  if not ok then
    if S.is_error(result) then
      io.stderr:write(result.message, '\n')
      return 2
    end
    local msg = tostring(result)
    if not os.getenv('EMBER_TRACEBACK') then msg = msg:match('^(.-)\nstack traceback:') or msg end
    io.stderr:write(opts.command or 'ember run', ': ', path, ': ', msg, '\n')
    return 1
  end
  -- the one line on stdout: the job's result
  if type(result) == 'table' then
    io.stdout:write(json.encode(result, { order = module_of(pipeline.jobs[cfg.job]).result_order }), '\n')
    io.stdout:flush()
  end
  return 0
end

return pipeline
