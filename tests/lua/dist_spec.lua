-- ember.dist and nn.DistributedDataParallel in one process (the 'self' backend): the API,
-- its errors, and DDP training equal to plain training. Several processes: tests/distributed/.
local U = dofile(debug.getinfo(1, 'S').source:match('^@(.*[/\\])') .. 'tensor_testutil.lua')
local close, raises = U.close, U.raises
local dist, nn, F = ember.dist, ember.nn, ember.nn.functional

describe('before init', function()
  it('reports the launcher and refuses collectives', function()
    assert.is_false(dist.is_initialized())
    assert.is_nil(dist.backend())
    local e = dist.env()
    assert.same({ 0, 1, 'none' }, { e.rank, e.world_size, e.launcher })
    raises(function() dist.all_reduce(ember.ones(2)) end, 'all_reduce: call ember.dist.init() first')
    raises(function() dist.rank() end, 'rank: call ember.dist.init() first')
    raises(function() nn.DistributedDataParallel(nn.Linear(2, 2), { bucket_cap_mb = -1 }) end,
      'DistributedDataParallel: bucket_cap_mb must be a number > 0, got -1')
  end)

  it("picks NCCL for a pipeline on cuda under backend 'auto'", function()
    local section = require 'ember.pipeline.distributed'
    assert.equal('nccl', section.backend_for('auto', 'cuda'))
    assert.equal('nccl', section.backend_for('auto', 'cuda:1'))
    assert.equal('auto', section.backend_for('auto', 'cpu'))
    assert.equal('mpi', section.backend_for('mpi', 'cuda'))   -- an explicit choice stays
    assert.equal('self', section.backend_for('self', 'cuda'))
  end)

  it('checks init options', function()
    raises(function() dist.init { backend = 'bogus' } end, "dist.init: unknown backend 'bogus'")
    -- the home-made ZeroMQ transport is gone: its names point to Gloo
    raises(function() dist.init { backend = 'tcp' } end, "dist.init: backend 'tcp' is gone")
    raises(function() dist.init { backend = 'zmq' } end, "dist.init: backend 'zmq' is gone")
    assert.is_false(dist.is_initialized())
    if ember.device_count('cuda') == 0 then
      -- no GPU: refused with the reason, before anything starts
      raises(function() dist.init { backend = 'nccl' } end, "dist.init: backend 'nccl' is not available: ")
      assert.is_false(dist.is_initialized())
    end
    raises(function() dist.init { timeout = -1 } end, 'dist.init: timeout must be a number of seconds > 0')
    raises(function() dist.init { bogus = 1 } end, "dist.init: unknown option 'bogus'")
  end)
end)

describe('a world of one process', function()
  setup(function() dist.init { timeout = 60 } end)

  it('has rank 0 of 1 on the self backend', function()
    assert.equal('self', dist.backend())
    assert.equal('self', dist.backend('cpu'))
    assert.equal('self', dist.backend('cuda'))   -- a world of one needs no communicator
    raises(function() dist.backend('tpu') end, "dist.backend: expected 'cpu' or 'cuda'")
    assert.same({ 0, 1, 0 }, { dist.rank(), dist.world_size(), dist.local_rank() })
    dist.init()   -- again: harmless
    raises(function() dist.init { backend = 'mpi' } end, "dist.init: already initialised with backend 'self'")
  end)

  it('runs every collective', function()
    local t = ember.tensor({ 1, 2, 3 })
    for _, op in ipairs { 'sum', 'avg', 'max', 'min', 'product' } do close(dist.all_reduce(t, op), { 1, 2, 3 }) end
    close(dist.broadcast(t, 0), { 1, 2, 3 })
    local g = dist.all_gather(ember.tensor({ { 1, 2 } }))
    assert.same({ 1, 1, 2 }, g.shape)
    close(g, { { { 1, 2 } } })
    close(dist.reduce_scatter(ember.tensor({ 4, 5 })), { 4, 5 })
    assert.is_nil(dist.barrier())
    local h = dist.all_reduce(ember.ones(4), 'sum', { async = true })
    assert.is_true(h:test())
    close(h:wait(), { 1, 1, 1, 1 })
    local empty = dist.all_gather(ember.zeros(0))
    assert.same({ 1, 0 }, empty.shape)
  end)

  it('runs all_to_all(_v), gather, scatter, reduce and all_gather_v', function()
    for _, dtype in ipairs { 'float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'bool' } do
      for _, n in ipairs { 0, 1, 7, 70001 } do
        local x = dtype == 'bool' and ember.rand(n):gt(0.5) or ember.rand(n):mul(200):to(dtype)
        local function same(out, what) assert.is_true(out:to('float64'):eq(x:to('float64')):all():item(), what) end
        local o = ember.zeros(n, { dtype = dtype })
        assert.equal(o, dist.all_to_all(o, x))
        same(o, 'all_to_all ' .. dtype)
        o = ember.zeros(n, { dtype = dtype })
        dist.all_to_all_v(o, { n }, x, ember.tensor({ n }, { dtype = 'int64' }))
        same(o, 'all_to_all_v ' .. dtype)
        same(dist.gather(nil, x, 0):view(n), 'gather ' .. dtype)
        o = ember.zeros(n, { dtype = dtype })
        same(dist.scatter(o, x, 0), 'scatter ' .. dtype)
        same(dist.all_gather_v(nil, { n }, x), 'all_gather_v ' .. dtype)
        local floating = dtype:find('float') ~= nil
        for _, op in ipairs { 'sum', 'avg', 'max', 'min', 'product' } do
          if floating or op ~= 'avg' then same(dist.reduce(x:clone(), op, 0), 'reduce ' .. op .. ' ' .. dtype) end
        end
      end
    end
    local h = dist.all_to_all_v(ember.zeros(2), { 2 }, ember.ones(2), { 2 }, { async = true })
    assert.is_true(h:test())
    close(h:wait(), { 1, 1 })
    close(dist.reduce(ember.ones(2), { async = true }):wait(), { 1, 1 })
    close(dist.world():gather(nil, ember.ones(2), 0, { async = true }):wait(), { { 1, 1 } })
  end)

  it('names what is wrong in the newer collectives', function()
    raises(function() dist.all_to_all_v(ember.zeros(2), { 2 }, ember.ones(3), { 3 }) end,
      'all_to_all_v #%d+ on the world group %(12 B of float32%): rank 0 sends 3 elements to rank 0, which expects 2',
      false)
    raises(function() dist.all_to_all_v(ember.zeros(2), { 2, 0 }, ember.ones(2), { 2 }) end,
      'all_to_all_v: out_counts has 2 entries, expected 1 (one per rank)')
    raises(function() dist.all_to_all_v(ember.zeros(2), { 2 }, ember.ones(2), { -1 }) end,
      'all_to_all_v: in_counts for rank 0 is -1')
    raises(function() dist.all_to_all_v(ember.zeros(2), { 3 }, ember.ones(2), { 2 }) end,
      'all_to_all_v: out_counts add up to 3 elements, the output has 2 (shape [2])')
    raises(function() dist.gather(nil, ember.ones(2), 1) end, 'gather: root 1 out of range for the world group of 1')
    raises(function() dist.scatter(ember.ones(2), nil, 0) end, 'scatter: rank 0 is the root and needs an input')
    raises(function() dist.scatter(ember.ones(2), ember.ones(3), 0) end,
      "scatter: the root's input has 3 elements, expected 2")
    raises(function() dist.reduce(ember.ones(2), 'sum', -1) end, 'reduce: root -1 out of range')
    raises(function() dist.reduce(ember.ones(2, { dtype = 'int32' }), 'avg') end, "reduce: 'avg' needs a floating dtype")
    raises(function() dist.all_gather_v(ember.zeros(3), { 3 }, ember.ones(3, { dtype = 'float64' })) end,
      'all_gather_v: output dtype float32, input dtype float64')
    raises(function() dist.all_gather_v(nil, ember.ones(1), ember.ones(1)) end,
      'all_gather_v: counts must be an integer tensor, got float32')
    raises(function() dist.all_to_all(ember.zeros(2), ember.ones(3)) end, 'all_to_all: the output has 2 elements')
  end)

  it('names what is wrong', function()
    raises(function() dist.all_reduce(ember.ones(2, 2):t()) end, 'all_reduce: the tensor (shape [2, 2]) is not contiguous')
    raises(function() dist.all_reduce(ember.ones(2, { dtype = 'int64' }), 'avg') end,
      "all_reduce: 'avg' needs a floating dtype, got int64")
    raises(function() dist.all_reduce(ember.ones(2), 'mean') end, "all_reduce: unknown reduction 'mean'")
    raises(function() dist.broadcast(ember.ones(2), 1) end, 'broadcast: root 1 out of range for the world group of 1 ranks')
    raises(function() dist.send(ember.ones(2), 0) end, 'send: rank 0 cannot send to itself')
    raises(function() dist.recv(ember.ones(2), 3) end, 'recv: source rank 3 out of range')
    raises(function() dist.all_gather(ember.ones(2), { out = ember.ones(3) }) end,
      'all_gather: the output has 3 elements, expected 2')
    raises(function() dist.all_gather(ember.ones(2), { out = ember.ones(2, { dtype = 'float64' }) }) end,
      'all_gather: output dtype float64, input dtype float32')
    local t = ember.ones(2)
    raises(function() dist.all_gather(t, { out = t }) end, 'all_gather: input and output share memory')
    raises(function() dist.all_reduce('x') end, 'all_reduce: expected a tensor, got string')
    raises(function() dist.new_group { 1 } end, 'new_group: rank 1 out of range for a group of 1')
    raises(function() dist.new_group {} end, 'new_group: expected a list of ranks')
    local g = dist.new_group { 0 }
    assert.same({ 0, 1 }, { g:rank(), g:size() })
    close(g:all_reduce(ember.ones(2)), { 1, 1 })
  end)
end)

describe('DistributedDataParallel on one process', function()
  local function make(seed)
    ember.manual_seed(seed)
    return nn.Sequential { nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3) }:double()
  end

  it('trains exactly as the plain model, with no_sync and join', function()
    local a, b = make(1), make(1)
    local ddp = nn.DistributedDataParallel(a, { bucket_cap_mb = 1e-6, first_bucket_mb = 1e-6 })
    local oa = ember.optim.SGD(ddp:parameters(), { lr = 0.1, momentum = 0.9 })
    local ob = ember.optim.SGD(b:parameters(), { lr = 0.1, momentum = 0.9 })
    ember.manual_seed(7)
    ddp:join(function()
      for _ = 1, 3 do
        local x, y = ember.randn(4, 5):double(), ember.randint(1, 4, { 4 })
        oa:zero_grad()
        ddp:no_sync(function() F.cross_entropy(ddp(x), y):backward() end)
        F.cross_entropy(ddp(x * 2), y):backward()
        oa:step()
        ob:zero_grad()
        F.cross_entropy(b(x), y):backward()
        F.cross_entropy(b(x * 2), y):backward()
        ob:step()
      end
    end)
    for i, p in ipairs(a:parameters()) do close(p, b:parameters()[i]:totable(), 1e-14) end
    assert.equal(4, #ddp:buckets())
    local s = ddp:stats()
    assert.equal(3, s.iterations)
    assert.is_true(s.rebuilt)
    assert.is_true(ddp:state_dict()['module.0.weight'] ~= nil)
  end)

  it('reports an unused parameter by name at the next forward', function()
    local Net = nn.Module:extend('Net')
    function Net:init()
      self.used = nn.Linear(3, 2)
      self.idle = nn.Linear(3, 2)
    end
    function Net:forward(x) return self.used(x) end
    local ddp = nn.DistributedDataParallel(Net())
    F.mse_loss(ddp(ember.ones(1, 3)), ember.zeros(1, 2)):backward()
    local msg = raises(function() ddp(ember.ones(1, 3)) end,
      "DistributedDataParallel: the previous iteration's backward produced no gradient for 2 parameters on rank 0: " ..
      "'idle.weight' (index 3), 'idle.bias' (index 4)")
    assert.truthy(msg:find('find_unused_parameters = true', 1, true))
    local ok = nn.DistributedDataParallel(Net(), { find_unused_parameters = true })
    for _ = 1, 2 do F.mse_loss(ok(ember.ones(1, 3)), ember.zeros(1, 2)):backward() end
  end)

  it('checks its arguments', function()
    raises(function() nn.DistributedDataParallel(42) end, 'DistributedDataParallel: expected a module to wrap, got number')
    raises(function() nn.DistributedDataParallel(nn.ReLU()) end, 'DistributedDataParallel: the model has no parameters')
    raises(function() nn.DistributedDataParallel(make(1), { comm_hook = 'int8' }) end,
      "DistributedDataParallel: comm_hook must be 'fp16', 'bf16' or nil, got 'int8'")
    raises(function() nn.DistributedDataParallel(make(1), { group = 3 }) end,
      'DistributedDataParallel: group must come from ember.dist.new_group, got number')
    raises(function() nn.DistributedDataParallel(make(1)):no_sync(3) end, 'no_sync: expected a function, got number')
  end)
end)
