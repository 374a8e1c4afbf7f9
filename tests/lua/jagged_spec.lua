-- Jagged (variable-length) batch fields through the data pipeline (issue 18, part 4):
-- values + lengths carried as one field, split by key for the model, with the pipeline's
-- guarantees (every sample once, resume, skipped records, readers in other processes);
-- the DLRM-random and Criteo-TSV sources and their pipelines.
local jagged = require 'ember.data.jagged'
local SPEC_DIR = debug.getinfo(1, 'S').source:match('^@(.*[/\\])')
local ROOT = SPEC_DIR .. '../../'
local EMBER = (os.getenv('EMBER_BUILD_DIR') or 'build') .. '/ember'
if EMBER:sub(1, 1) ~= '/' then EMBER = os.getenv('PWD') .. '/' .. EMBER end

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  os.execute("mkdir -p '" .. d .. "'")
  return d
end

-- A dataset whose sample i has, for key k, the values i*100 + k*10 + 1 .. + ((i + k) % 4)
-- (some bags empty); sample 7 is a bad record when bad = true.
local function write_dataset(dir, bad)
  local path = dir .. '/jag.lua'
  local f = assert(io.open(path, 'w'))
  f:write(string.format([[
local jagged = require 'ember.data.jagged'
local ds = {}
function ds:size() return 20 end
function ds:get(i)
  if %s and i == 7 then error('a bad record') end
  local parts = {}
  for k = 1, 3 do
    local p = {}
    for j = 1, (i + k) %% 4 do p[j] = i * 100 + k * 10 + j end
    parts[k] = k == 2 and ember.tensor(p, {dtype = 'int64'}) or p
  end
  return {x = ember.tensor({i, -i}), y = i, sparse = jagged.sample(parts)}
end
return ds
]], tostring(bad)))
  f:close()
  return path
end

-- Checks a delivered batch against the rule the dataset follows; returns its sample ids.
local function check_batch(b)
  local ids = b.ids:totable()
  assert.are.equal(3, #b.sparse)
  assert.are.same({ #ids, 3 }, b.sparse.lengths.shape)
  for k = 1, 3 do
    local vals, offs = b.sparse[k][1]:totable(), b.sparse[k][2]:totable()
    assert.are.equal(#ids, #offs)
    local at = 1
    for r, id in ipairs(ids) do
      assert.are.equal(at, offs[r])   -- 1-based bag starts
      local len = (id + k) % 4
      assert.are.equal(len, b.sparse.lengths[r][k]:item())
      for j = 1, len do assert.are.equal(id * 100 + k * 10 + j, vals[at + j - 1]) end
      at = at + len
    end
    assert.are.equal(at - 1, #vals)
  end
  assert.are.same(ids, b.y:totable())
  return ids
end

describe('jagged batch fields', function()
  it('split by key: values key-major, offsets per bag (em_data_jagged_split)', function()
    local values = ember.tensor({ 1, 2, 3, 4, 5, 6 }, { dtype = 'int64' })
    local lengths = ember.tensor({ { 1, 0 }, { 2, 3 } }, { dtype = 'int64' })
    local kt = jagged.keyed(values, lengths)
    assert.are.equal(2, kt:num_keys())
    assert.are.same({ 1, 2, 3 }, kt[1][1]:totable())
    assert.are.same({ 1, 2 }, kt[1][2]:totable())
    assert.are.same({ 4, 5, 6 }, kt[2][1]:totable())
    assert.are.same({ 1, 1 }, kt[2][2]:totable())
    assert.has_error(function() jagged.keyed(values, ember.tensor({ { 1, 0 }, { 2, 2 } }, { dtype = 'int64' })) end,
      'data.jagged_split: lengths count 5 values, the values tensor has 6 rows')
    assert.has_error(function() jagged.keyed(values, ember.tensor({ { -1, 0 }, { 2, 2 } }, { dtype = 'int64' })) end)
  end)

  for _, workers in ipairs { 0, 2 } do
    it('delivers every sample once, in and out of process (workers = ' .. workers .. ')', function()
      local dir = tmpdir()
      local L = ember.data.ReaderLoader { dataset = write_dataset(dir, false), batch_size = 6, shuffle = true,
        seed = 3, num_workers = workers }
      local seen = {}
      for b in L:epoch(1) do
        for _, id in ipairs(check_batch(b)) do
          assert.is_nil(seen[id])
          seen[id] = true
        end
      end
      for i = 1, 20 do assert.is_true(seen[i]) end
      L:close()
    end)
  end

  it('resumes mid-epoch with the rest of the samples, jagged fields intact', function()
    local dir = tmpdir()
    local path = write_dataset(dir, false)
    local L = ember.data.ReaderLoader { dataset = path, batch_size = 4, shuffle = true, seed = 5, num_workers = 1 }
    local first, it_ = {}, L:epoch(2)
    for _ = 1, 2 do for _, id in ipairs(check_batch(it_())) do first[#first + 1] = id end end
    local st = L:state()
    L:close()
    local L2 = ember.data.ReaderLoader { dataset = path, batch_size = 4, shuffle = true, seed = 5, num_workers = 1 }
    L2:load_state(st)
    local all = {}
    for _, id in ipairs(first) do all[id] = true end
    for b in L2:epoch(2) do
      for _, id in ipairs(check_batch(b)) do
        assert.is_nil(all[id])
        all[id] = true
      end
    end
    for i = 1, 20 do assert.is_true(all[i]) end
    L2:close()
  end)

  for _, workers in ipairs { 0, 1 } do
    it('skips a bad record: its values leave with it (workers = ' .. workers .. ')', function()
      local dir = tmpdir()
      local L = ember.data.ReaderLoader { dataset = write_dataset(dir, true), batch_size = 10, num_workers = workers,
        on_bad_record = 'skip' }
      local n = 0
      for b in L:epoch(1) do
        for _, id in ipairs(check_batch(b)) do
          assert.are_not.equal(7, id)
          n = n + 1
        end
      end
      assert.are.equal(19, n)
      L:close()
    end)
  end

  it('get_batch may return jagged.batch(values, lengths)', function()
    local dir = tmpdir()
    local path = dir .. '/gb.lua'
    local f = assert(io.open(path, 'w'))
    f:write([[
local jagged = require 'ember.data.jagged'
return { size = function() return 8 end,
  get_batch = function(_, ids)
    local vals, lens = {}, {}
    for r = 1, ids:numel() do
      local id = ids[r]:item()
      lens[r] = { id % 3 }
      for j = 1, id % 3 do vals[#vals + 1] = id * 10 + j end
    end
    return { y = ids:clone(), s = jagged.batch(ember.tensor(vals, {dtype = 'int64'}), ember.tensor(lens, {dtype = 'int64'})) }
  end }
]])
    f:close()
    local L = ember.data.ReaderLoader { dataset = path, batch_size = 4, num_workers = 1 }
    local count = 0
    for b in L:epoch(1) do
      local vals, offs = b.s[1][1]:totable(), b.s[1][2]:totable()
      for r, id in ipairs(b.ids:totable()) do
        for j = 1, id % 3 do assert.are.equal(id * 10 + j, vals[offs[r] + j - 1]) end
        count = count + 1
      end
    end
    assert.are.equal(8, count)
    L:close()
  end)
end)

describe('recommendation sources', function()
  it("DLRM's random data: bag sizes and rows as dlrm_data_pytorch.py draws them, fixed per sample", function()
    local make = dofile(ROOT .. 'pipelines/data/dlrm_synthetic.lua')
    local ds = make { num_samples = 50, table_sizes = { 5, 100 }, num_indices_per_lookup = 4, seed = 2 }
    local labels = 0
    for i = 1, 50 do
      local s = ds:get(i)
      assert.are.same(s.dense:totable(), ds:get(i).dense:totable())
      for _, v in ipairs(s.dense:totable()) do assert.is_true(v >= 0 and v < 1) end
      for t, size in ipairs { 5, 100 } do
        local rows = s.sparse.parts[t]
        assert.is_true(#rows >= 1 and #rows <= 4)
        for q, r in ipairs(rows) do
          assert.is_true(r >= 1 and r <= size)
          if q > 1 then assert.is_true(r > rows[q - 1]) end   -- unique, sorted
        end
      end
      labels = labels + s.label
    end
    assert.is_true(labels > 5 and labels < 45)
  end)

  it("Criteo's TSV layout: log dense, hashed categories, empty fields, bad lines named", function()
    local dir = tmpdir()
    local path = dir .. '/c.tsv'
    local f = assert(io.open(path, 'w'))
    local c = {}
    for j = 1, 26 do c[j] = string.format('%08x', j * 1000003) end
    c[3] = ''
    f:write('1\t0\t7\t\t-3\t1\t2\t3\t4\t5\t6\t7\t8\t9\t', table.concat(c, '\t'), '\n')
    f:write('0\t1\t1\t1\t1\t1\t1\t1\t1\t1\t1\t1\t1\t1\t', table.concat(c, '\t'), '\n')
    f:write('0\t1\t1\n')
    f:close()
    local ds = dofile(ROOT .. 'pipelines/data/criteo_tsv.lua') { file = path, table_sizes = 1000 }
    assert.are.equal(3, ds:size())
    local s = ds:get(1)
    assert.are.equal(1, s.label)
    local d = s.dense:totable()
    assert.are.equal(0, d[1])
    assert.is_true(math.abs(d[2] - math.log(8)) < 1e-6)
    assert.are.equal(0, d[3])   -- empty
    assert.are.equal(0, d[4])   -- negative
    assert.are.equal((1000003 % 1000) + 1, s.sparse.parts[1][1])
    assert.are.equal(1, s.sparse.parts[3][1])   -- empty: 0, stored 1-based
    assert.are.equal(0, ds:get(2).label)
    assert.has_error(function() ds:get(3) end, "'" .. path .. "' line 3: 3 columns, expected 40 (label, 13 integers, 26 categories)")
  end)

  it('pipelines/dlrm_synthetic.yaml learns (ROC AUC) and dlrm_criteo.yaml runs on a generated file', function()
    local dir = tmpdir()
    local out = io.popen(string.format("cd '%s' && '%s' run pipelines/dlrm_synthetic.yaml epochs=1 " ..
      "2>&1", ROOT, EMBER)):read('*a')
    local auc = tonumber(out:match('"test_roc_auc":([%d%.e%-]+)'))
    assert.is_not_nil(auc, out)
    assert.is_true(auc > 0.6, out)
    local tsv = dir .. '/criteo.tsv'
    out = io.popen(string.format("cd '%s' && '%s' examples/criteo_sample.lua '%s' 2000 && '%s' run " ..
      "pipelines/dlrm_criteo.yaml data.source_options.file='%s' 2>&1", ROOT, EMBER, tsv, EMBER, tsv)):read('*a')
    local loss = tonumber(out:match('"test_loss":([%d%.e%-]+)'))
    assert.is_not_nil(loss, out)
    assert.is_true(loss > 0 and loss < 1.5, out)
  end)
end)
