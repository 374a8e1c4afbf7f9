-- ember.nn: module trees, registration, state dicts (through ember.save/load), train and
-- eval, default initialisation, layer forwards and the functional losses.
local U = dofile(debug.getinfo(1, 'S').source:match('^@(.*[/\\])') .. 'tensor_testutil.lua')
local close, raises = U.close, U.raises
local nn, F = ember.nn, ember.nn.functional

local F64 = { dtype = 'float64' }
local I64 = { dtype = 'int64' }

local function shape_text(t) return table.concat(t.shape, 'x') end

-- A small custom module with a nested child, a parameter, a buffer and a plain field.
local Block = nn.Module:extend('Block')
function Block:init(n)
  self.fc = nn.Linear(n, n)
  self.norm = nn.LayerNorm(n)
  self.gain = nn.Parameter(ember.ones(1))
  self:register_buffer('calls', ember.zeros(1))
  self.label = 'block'
end
function Block:forward(x)
  ember.no_grad(function() self.calls:add_(1) end)
  return self.norm(self.fc(x)):relu() * self.gain
end

local Net = nn.Module:extend('Net')
function Net:init()
  self.layer1 = Block(4)
  self.head = nn.Sequential{ nn.Linear(4, 3), nn.Tanh() }
end
function Net:forward(x) return self.head(self.layer1(x)) end

describe('Module', function()
  it('registers children, parameters and buffers under dotted names in order', function()
    local net = Net()
    local names = {}
    for _, pair in ipairs(net:named_parameters()) do names[#names + 1] = pair[1] .. ':' .. shape_text(pair[2]) end
    assert.are.same({ 'layer1.gain:1', 'layer1.fc.weight:4x4', 'layer1.fc.bias:4', 'layer1.norm.weight:4',
      'layer1.norm.bias:4', 'head.0.weight:3x4', 'head.0.bias:3' }, names)
    assert.are.equal(7, #net:parameters())
    assert.are.same({ 'layer1.calls' }, (function()
      local out = {}
      for _, pair in ipairs(net:named_buffers()) do out[#out + 1] = pair[1] end
      return out
    end)())
    assert.are.equal(1, #net:buffers())
    assert.are.equal(2, #net:children())
    local mods = {}
    for _, pair in ipairs(net:named_modules()) do mods[#mods + 1] = pair[1] end
    assert.are.same({ '', 'layer1', 'layer1.fc', 'layer1.norm', 'head', 'head.0', 'head.1' }, mods)
    assert.are.equal(7, #net:modules())
    assert.are.equal('block', net.layer1.label)
    assert.is_true(nn.is_module(net.head[1]))
    assert.are.equal(net.head[2], net.head[-1])
    assert.are.equal(2, net.head:len())
    local visited = {}
    net:apply(function(m) visited[#visited + 1] = m.__name end)
    assert.are.same({ 'Linear', 'LayerNorm', 'Block', 'Linear', 'Tanh', 'Sequential', 'Net' }, visited)
  end)

  it('runs forward when called and records gradients into every parameter', function()
    local net = Net()
    local y = net(ember.randn(5, 4))
    assert.are.same({5, 3}, y.shape)
    y:sum():backward()
    for _, pair in ipairs(net:named_parameters()) do
      assert.is_not_nil(pair[2].grad, pair[1])
    end
    close(net.layer1.calls, {1})
    net:zero_grad({ set_to_none = false })
    close(net.head[1].bias.grad, {0, 0, 0})
    net:zero_grad()
    assert.is_nil(net.head[1].bias.grad)
  end)

  it('replaces and removes registered entries by assignment', function()
    local m = nn.Module()
    m.w = nn.Parameter(ember.zeros(2))
    m.child = nn.ReLU()
    m:register_buffer('b', ember.zeros(1))
    m.count = 3
    assert.are.equal(1, #m:parameters())
    assert.are.equal(3, m.count)
    raises(function() m.w = ember.zeros(2) end, "Module: parameter 'w' can only be replaced by a leaf tensor that " ..
      'requires grad')
    raises(function() m.child = 5 end, "Module: child module 'child' can only be replaced by a module or nil")
    raises(function() m.b = 'x' end, "Module: buffer 'b' can only be replaced by a tensor or nil")
    m.w = nil
    m.child = nil
    m.b = nil
    assert.are.equal(0, #m:parameters())
    assert.are.equal(0, #m:children())
    assert.are.equal(0, #m:buffers())
    raises(function() m:register_buffer('a.b', ember.zeros(1)) end,
      "register_buffer: expected a non-empty name without '.', got 'a.b'")
    raises(function() nn.Module()(1) end, 'Module: forward is not implemented')
  end)

  it('runs ReLU then MaxPool2d in Sequential with the values and gradients of the written order', function()
    ember.manual_seed(3)
    local conv = nn.Conv2d(1, 3, 3, { padding = 1 })
    local model = nn.Sequential{ conv, nn.ReLU(), nn.MaxPool2d(2, { ceil_mode = true }), nn.Flatten() }
    local x = ember.randn(2, 1, 7, 7)
    local y = model(x)
    y:sum():backward()
    local g = conv.weight.grad:clone()
    conv.weight.grad = nil
    local want = nn.Flatten()(F.max_pool2d(F.relu(conv(x)), 2, { ceil_mode = true }))
    want:sum():backward()
    assert.are.same(want.shape, y.shape)
    assert.are.equal(0, (y - want):abs():max():item())
    assert.are.equal(0, (g - conv.weight.grad):abs():max():item())
  end)

  it('gives the 2x2 max_pool2d backward of float32 (vectorised) the float64 (portable) answer, ties and NaN too', function()
    -- widths whose output rows end inside, at and past a vector of 16; values with many ties;
    -- a few NaN (the last NaN of a window wins, as in PyTorch)
    ember.manual_seed(5)
    for _, W in ipairs { 2, 6, 28, 32, 36, 70 } do
      local x64 = (ember.randn(3, 2, 4, W) * 2):floor():to('float64')
      local flat = x64:reshape(-1)
      for _, i in ipairs { 1, 6, 7, 8 } do flat[i] = 0 / 0 end
      local x32 = x64:to("float32"):requires_grad_()
      x64:requires_grad_()
      local gy = ember.randn(3, 2, 2, W / 2)
      local y32, y64 = F.max_pool2d(x32, 2), F.max_pool2d(x64, 2)
      y32:backward(gy)
      y64:backward(gy:to('float64'))
      assert.are.equal(0, (x32.grad:to('float64') - x64.grad):abs():max():item(), 'width ' .. W)
      local a, b = y32:to('float64'):reshape(-1):totable(), y64:reshape(-1):totable()
      for i = 1, #a do assert(a[i] == b[i] or (a[i] ~= a[i] and b[i] ~= b[i]), 'width ' .. W .. ' output ' .. i) end
    end
  end)

  it('routes max_pool2d gradients to the max of each window, in float32 as in float64', function()
    -- the 2x2 tiled backward (one branch-free pass) and the general scatter, against a
    -- gradient built by hand: each window's gy goes to its largest input
    ember.manual_seed(4)
    local H, W = 8, 6
    for _, case in ipairs { { 2, 2, 0 }, { 3, 2, 1 }, { 2, 1, 0 } } do
      local k, s, pad = case[1], case[2], case[3]
      for _, dt in ipairs { 'float32', 'float64' } do
        local x = ember.randn(2, 3, H, W):to(dt):requires_grad_()
        local y = F.max_pool2d(x, k, { stride = s, padding = pad })
        local OH, OW = y.shape[3], y.shape[4]
        local gy = ember.randn(2, 3, OH, OW):to(dt)
        y:backward(gy)
        local xs, gs, got = x:detach():reshape(-1):totable(), gy:reshape(-1):totable(), x.grad:reshape(-1):totable()
        local want = {}
        for i = 1, #xs do want[i] = 0 end
        for plane = 0, 5 do
          for oh = 0, OH - 1 do
            for ow = 0, OW - 1 do
              local best, at = -math.huge, nil
              for h = oh * s - pad, oh * s - pad + k - 1 do
                for w = ow * s - pad, ow * s - pad + k - 1 do
                  if h >= 0 and h < H and w >= 0 and w < W then
                    local i = plane * H * W + h * W + w + 1
                    if xs[i] > best then best, at = xs[i], i end
                  end
                end
              end
              want[at] = want[at] + gs[plane * OH * OW + oh * OW + ow + 1]
            end
          end
        end
        for i = 1, #xs do
          assert(math.abs(got[i] - want[i]) <= 1e-6 * (1 + math.abs(want[i])),
            string.format('kernel %d stride %d padding %d %s: element %d got %g want %g', k, s, pad, dt, i, got[i], want[i]))
        end
      end
    end
  end)

  it('prints the tree as PyTorch does', function()
    local model = nn.Sequential{ nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.25),
      nn.Sequential{ { 'conv', nn.Conv2d(1, 2, 3, { padding = 1 }) }, { 'pool', nn.MaxPool2d(2) } } }
    assert.are.equal(table.concat({
      'Sequential(',
      '  (0): Linear(in_features=4, out_features=8, bias=true)',
      '  (1): ReLU()',
      '  (2): Dropout(p=0.25)',
      '  (3): Sequential(',
      '    (conv): Conv2d(1, 2, kernel_size=(3, 3), stride=1, padding=1)',
      '    (pool): MaxPool2d(kernel_size=2, stride=2, padding=0)',
      '  )',
      ')' }, '\n'), tostring(model))
    assert.are.equal('Block(\n  (fc): Linear(in_features=4, out_features=4, bias=true)\n' ..
      '  (norm): LayerNorm((4), eps=1e-05, elementwise_affine=true)\n)', tostring(Block(4)))
  end)

  it('converts with to() and keeps parameters trainable leaves', function()
    local m = nn.BatchNorm1d(3)
    m:to('float64')
    assert.are.equal('float64', m.weight.dtype)
    assert.is_true(m.weight.requires_grad)
    assert.is_true(m.weight:is_leaf())
    assert.are.equal('float64', m.running_mean.dtype)
    assert.are.equal('int64', m.num_batches_tracked.dtype)
  end)
end)

describe('state_dict', function()
  local tmp = os.tmpname()
  after_each(function() os.remove(tmp) end)

  it('round-trips through ember.save and ember.load', function()
    ember.manual_seed(1)
    local a = nn.Sequential{ nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2) }
    a(ember.randn(6, 3))   -- moves the running statistics
    local sd = a:state_dict()
    local keys = {}
    for k in pairs(sd) do keys[#keys + 1] = k end
    table.sort(keys)
    assert.are.same({ '0.bias', '0.weight', '1.bias', '1.num_batches_tracked', '1.running_mean', '1.running_var',
      '1.weight', '3.bias', '3.weight' }, keys)
    ember.save(tmp, sd)
    local b = nn.Sequential{ nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2) }
    local loaded = ember.load(tmp)
    local result = b:load_state_dict(loaded)
    assert.are.same({}, result.missing)
    for _, k in ipairs(keys) do close(b:state_dict()[k], a:state_dict()[k]:totable(), 0) end
    a:eval(); b:eval()
    local x = ember.randn(5, 3)
    close(b(x), a(x):totable(), 0)
    assert.is_true(b[1].weight.requires_grad)
  end)

  it('reports missing and unexpected keys and shape mismatches before copying anything', function()
    local m = nn.Sequential{ nn.Linear(2, 3) }
    local before = m[1].weight:clone()
    local msg = raises(function()
      m:load_state_dict({ ['0.weight'] = ember.zeros(3, 2), ['0.extra'] = ember.zeros(1) })
    end, 'load_state_dict: Sequential: missing keys: 0.bias; unexpected keys: 0.extra')
    assert.truthy(msg)
    raises(function() m:load_state_dict({ ['0.weight'] = ember.zeros(2, 3), ['0.bias'] = ember.zeros(3) }) end,
      "load_state_dict: Sequential: size mismatch: '0.weight' has shape [2, 3] in the state dict, the model has [3, 2]")
    close(m[1].weight, before:totable(), 0)
    local r = m:load_state_dict({ ['0.weight'] = ember.ones(3, 2), ['x'] = ember.ones(1) }, { strict = false })
    assert.are.same({ '0.bias' }, r.missing)
    assert.are.same({ 'x' }, r.unexpected)
    close(m[1].weight, {{1, 1}, {1, 1}, {1, 1}})
    raises(function() m:load_state_dict(5) end, 'load_state_dict: expected a table of name = tensor, got number')
  end)
end)

describe('train and eval', function()
  it('switch dropout on and off', function()
    ember.manual_seed(3)
    local m = nn.Sequential{ nn.Dropout(0.5) }
    assert.is_true(m[1].training)
    local y = m(ember.ones(1000)):totable()
    local zeros, twos = 0, 0
    for _, v in ipairs(y) do
      if v == 0 then zeros = zeros + 1 elseif v == 2 then twos = twos + 1 end
    end
    assert.are.equal(1000, zeros + twos)
    assert.is_true(zeros > 400 and zeros < 600, 'zeros: ' .. zeros)
    m:eval()
    assert.is_false(m[1].training)
    close(m(ember.ones(5)), {1, 1, 1, 1, 1}, 0)
    m:train()
    assert.is_true(m[1].training)
  end)

  it('switch batch norm between batch and running statistics', function()
    local bn = nn.BatchNorm1d(2)
    local x = ember.tensor({{1, 2}, {3, 6}, {5, 10}, {7, 14}})
    -- batch mean {4, 8}, biased var {5, 20}: (x - mean) / sqrt(var + eps)
    local s1, s2 = math.sqrt(5 + 1e-5), math.sqrt(20 + 1e-5)
    close(bn(x), {{-3 / s1, -6 / s2}, {-1 / s1, -2 / s2}, {1 / s1, 2 / s2}, {3 / s1, 6 / s2}})
    -- running: 0.9 * init + 0.1 * batch (unbiased var {20/3, 80/3})
    close(bn.running_mean, {0.4, 0.8})
    close(bn.running_var, {0.9 + 2 / 3, 0.9 + 8 / 3})
    assert.are.equal(1, bn.num_batches_tracked:item())
    bn:eval()
    local rv1, rv2 = math.sqrt(0.9 + 2 / 3 + 1e-5), math.sqrt(0.9 + 8 / 3 + 1e-5)
    close(bn(x), {{0.6 / rv1, 1.2 / rv2}, {2.6 / rv1, 5.2 / rv2}, {4.6 / rv1, 9.2 / rv2}, {6.6 / rv1, 13.2 / rv2}})
    close(bn.running_mean, {0.4, 0.8})   -- unchanged in eval
    raises(function() bn(ember.zeros(2, 2, 2, 2)) end, 'BatchNorm1d: expected a 2-d or 3-d input, got a 4-d tensor')
  end)

  it('normalise each channel of BatchNorm2d over batch and space', function()
    ember.manual_seed(5)
    local bn2 = nn.BatchNorm2d(3, { momentum = false })   -- cumulative average of the statistics
    local x = ember.randn(4, 3, 5, 5) * 3 + 2
    local y = bn2(x)
    close(y:mean({1, 3, 4}), {0, 0, 0}, 1e-5)
    close(y:var({1, 3, 4}, false, { unbiased = false }), {1, 1, 1}, 1e-3)
    close(bn2.running_mean, x:mean({1, 3, 4}):totable(), 1e-5)   -- momentum 1/1 on the first batch
    bn2(x * 0 + 1)
    close(bn2.running_mean, ((x:mean({1, 3, 4}) + 1) / 2):totable(), 1e-5)
  end)
end)

describe('default initialisation', function()
  local function stats(t)
    local v = t:detach():double()
    local mean = v:mean():item()
    return mean, v:std():item(), v:abs():max():item()
  end

  it('follows PyTorch for Linear and Conv2d (kaiming_uniform with a = sqrt(5))', function()
    ember.manual_seed(7)
    local lin = nn.Linear(400, 300)
    local bound = 1 / math.sqrt(400)
    local _, std, maxabs = stats(lin.weight)
    assert.is_true(maxabs <= bound and maxabs > 0.99 * bound, 'max ' .. maxabs)
    assert.is_true(math.abs(std - bound / math.sqrt(3)) < 0.02 * bound, 'std ' .. std)
    local _, bstd, bmax = stats(lin.bias)
    assert.is_true(bmax <= bound and bstd > 0.4 * bound)
    local conv = nn.Conv2d(16, 32, 3)
    local cb = 1 / math.sqrt(16 * 9)
    local _, cstd, cmax = stats(conv.weight)
    assert.are.same({32, 16, 3, 3}, conv.weight.shape)
    assert.is_true(cmax <= cb and math.abs(cstd - cb / math.sqrt(3)) < 0.05 * cb)
    local _, _, cbmax = stats(conv.bias)
    assert.is_true(cbmax <= cb)
  end)

  it('gives embeddings N(0, 1) and norms ones and zeros', function()
    ember.manual_seed(8)
    local e = nn.Embedding(1000, 50, { padding_idx = 3 })
    local mean, std = stats(e.weight)
    assert.is_true(math.abs(mean) < 0.02 and math.abs(std - 1) < 0.02, mean .. ' ' .. std)
    close(e.weight[{3}], ember.zeros(50):totable(), 0)
    local ln, bn = nn.LayerNorm({2, 3}), nn.BatchNorm2d(4)
    close(ln.weight, {{1, 1, 1}, {1, 1, 1}}, 0)
    close(ln.bias, {{0, 0, 0}, {0, 0, 0}}, 0)
    close(bn.weight, {1, 1, 1, 1}, 0)
    close(bn.running_var, {1, 1, 1, 1}, 0)
  end)

  it('offers the nn.init helpers', function()
    local t = ember.empty(20, 30)
    nn.init.xavier_uniform_(t)
    local a = math.sqrt(6 / 50)
    assert.is_true(t:abs():max():item() <= a)
    nn.init.zeros_(t)
    close(t:sum(), 0, 0)
    nn.init.ones_(t)
    close(t:sum(), 600, 0)
    local p = nn.Parameter(ember.zeros(3))
    nn.init.normal_(p, 0, 1)   -- parameters are filled without recording
    assert.is_true(p:abs():sum():item() > 0)
    assert.are.same({30, 20}, { nn.init.calculate_fans(t) })
    raises(function() nn.init.kaiming_uniform_(ember.zeros(3)) end,
      'calculate_fans: fan in and fan out need a tensor with at least 2 dims, got [3]')
  end)
end)

describe('layers', function()
  it('compute Linear, Conv2d and pooling as their definitions say', function()
    local lin = nn.Linear(2, 2)
    ember.no_grad(function()
      lin.weight:copy_(ember.tensor({{1, 2}, {3, 4}}))
      lin.bias:copy_(ember.tensor({0.5, -0.5}))
    end)
    close(lin(ember.tensor({{1, 1}, {2, 0}})), {{3.5, 6.5}, {2.5, 5.5}})
    local conv = nn.Conv2d(1, 1, 2, { bias = false })
    ember.no_grad(function() conv.weight:fill_(1) end)
    local x = ember.arange(1, 10):view(1, 1, 3, 3)
    close(conv(x), {{{{12, 16}, {24, 28}}}})
    local img = ember.arange(1, 17):view(1, 1, 4, 4)
    close(nn.MaxPool2d(2)(img), {{{{6, 8}, {14, 16}}}})
    close(nn.AvgPool2d(2)(img), {{{{3.5, 5.5}, {11.5, 13.5}}}})
    close(nn.AdaptiveAvgPool2d(1)(img), {{{{8.5}}}})
    assert.are.same({1, 16}, nn.Flatten()(img).shape)
    assert.are.equal(img, nn.Identity()(img))
    close(nn.ReLU()(ember.tensor({-1, 2})), {0, 2})
    close(nn.Sigmoid()(ember.tensor({0})), {0.5})
    close(nn.Tanh()(ember.tensor({0})), {0})
    close(nn.SiLU()(ember.tensor({1})), {1 / (1 + math.exp(-1))})
    close(nn.GELU()(ember.tensor({1})), {0.8413447})
    close(nn.Softmax(1)(ember.tensor({0, 0})), {0.5, 0.5})
    close(nn.LayerNorm(2)(ember.tensor({{1, 3}})), {{-1, 1}}, 1e-4)
    raises(function() nn.Linear(2, -1) end, 'Linear: out_features must be a non-negative integer, got -1')
    raises(function() nn.Conv2d(3, 4, 3, { groups = 2 }) end, 'Conv2d: groups must be a positive integer dividing')
  end)

  it('look up embeddings with 1-based indices and skip the padding row in backward', function()
    local e = nn.Embedding(4, 2, { padding_idx = 2 })
    ember.no_grad(function() e.weight:copy_(ember.tensor({{1, 1}, {0, 0}, {3, 3}, {4, 4}})) end)
    local idx = ember.tensor({{1, 2}, {3, 1}}, I64)
    close(e(idx), {{{1, 1}, {0, 0}}, {{3, 3}, {1, 1}}})
    e(idx):sum():backward()
    close(e.weight.grad, {{2, 2}, {0, 0}, {1, 1}, {0, 0}})
    local bag = nn.EmbeddingBag(4, 2, { mode = 'sum' })
    ember.no_grad(function() bag.weight:copy_(ember.tensor({{1, 0}, {0, 1}, {2, 2}, {5, 5}})) end)
    close(bag(ember.tensor({{1, 2}, {3, 4}}, I64)), {{1, 1}, {7, 7}})
    close(bag(ember.tensor({1, 2, 3, 4}, I64), ember.tensor({1, 2}, I64)), {{1, 0}, {7, 8}})
    local mean_bag = nn.EmbeddingBag(4, 2)
    ember.no_grad(function() mean_bag.weight:copy_(bag.weight) end)
    close(mean_bag(ember.tensor({{3, 4}}, I64)), {{3.5, 3.5}})
  end)
end)

describe('functional losses', function()
  local logits = ember.tensor({{1, 2, 3}, {1, 0, -1}}, F64)
  local target = ember.tensor({3, 1}, I64)
  -- log_softmax rows: log(e^x / sum e^x)
  local function lsm(row)
    local s = 0
    for _, v in ipairs(row) do s = s + math.exp(v) end
    local out = {}
    for i, v in ipairs(row) do out[i] = v - math.log(s) end
    return out
  end
  local l1, l2 = lsm({1, 2, 3}), lsm({1, 0, -1})

  it('compute cross_entropy with its options', function()
    close(F.cross_entropy(logits, target), -(l1[3] + l2[1]) / 2, 1e-12)
    close(F.cross_entropy(logits, target, { reduction = 'sum' }), -(l1[3] + l2[1]), 1e-12)
    close(F.cross_entropy(logits, target, { reduction = 'none' }), {-l1[3], -l2[1]}, 1e-12)
    -- label smoothing eps: (1 - eps) * nll + eps * mean over classes of -log p
    local eps = 0.1
    local s1 = (1 - eps) * -l1[3] + eps * -(l1[1] + l1[2] + l1[3]) / 3
    local s2 = (1 - eps) * -l2[1] + eps * -(l2[1] + l2[2] + l2[3]) / 3
    close(F.cross_entropy(logits, target, { label_smoothing = eps }), (s1 + s2) / 2, 1e-12)
    -- ignore_index: that sample drops out of the mean
    close(F.cross_entropy(logits, ember.tensor({3, -100}, I64)), -l1[3], 1e-12)
    close(F.cross_entropy(logits, ember.tensor({3, 2}, I64), { ignore_index = 2 }), -l1[3], 1e-12)
    -- class weights: weighted mean
    local w = ember.tensor({1, 1, 3}, F64)
    close(F.cross_entropy(logits, target, { weight = w }), -(3 * l1[3] + l2[1]) / 4, 1e-12)
    close(F.nll_loss(logits:log_softmax(2), target), -(l1[3] + l2[1]) / 2, 1e-12)
    raises(function() F.cross_entropy(logits, target, { reduction = 'avg' }) end,
      "cross_entropy: reduction must be 'mean', 'sum' or 'none', got 'avg'")
    raises(function() F.cross_entropy(logits, target, { smoothing = 1 }) end,
      "cross_entropy: unknown option 'smoothing'")
  end)

  it('compute float32 cross_entropy row by row as float64 does (16-row blocks and the rest)', function()
    -- 37 rows: two blocks of 16 summed across rows, 5 left over; values up to 1e3 (the max
    -- must come out first) and a row with one class at -inf
    ember.manual_seed(7)
    local x64 = ember.randn(37, 10, { dtype = 'float64' }) * 4
    x64[5]:fill_(0); x64[5][1] = 1000; x64[20][3] = -math.huge
    local y = ember.randint(1, 11, { 37 })
    y[20] = 4
    local got = F.cross_entropy(x64:float(), y, { reduction = 'none' }):double()
    local want = F.cross_entropy(x64, y, { reduction = 'none' })
    assert((got - want):abs():max():item() <= 1e-4, 'float32 rows differ from float64')
    close(F.cross_entropy(x64:float(), y):double(), F.cross_entropy(x64, y):item(), 1e-5)
  end)

  it('give cross_entropy gradients softmax - onehot', function()
    local x = logits:clone():requires_grad_()
    F.cross_entropy(x, target):backward()
    local function sm(row) local out = {} for i, v in ipairs(row) do out[i] = math.exp(v) end return out end
    local p1, p2 = sm(l1), sm(l2)
    close(x.grad, {{p1[1] / 2, p1[2] / 2, (p1[3] - 1) / 2}, {(p2[1] - 1) / 2, p2[2] / 2, p2[3] / 2}}, 1e-12)
  end)

  it('count rows whose largest logit is at the target as argmax does', function()
    -- row 1: max at 3; row 2: a tie between 1 and 2 (the first wins); row 3: NaN at 2 beats
    -- the 5 at 3 (NaN is largest); row 4: two NaNs (the first wins)
    local x = ember.tensor({{1, 2, 3}, {4, 4, 0}, {0, 0 / 0, 5}, {0 / 0, 1, 0 / 0}}, F64)
    assert.equals(4, F.count_correct(x, ember.tensor({3, 1, 2, 1}, I64)))
    assert.equals(0, F.count_correct(x, ember.tensor({1, 2, 3, 3}, I64)))
    assert.equals(2, F.count_correct(x:float(), ember.tensor({3, 2, 2, 2}, { dtype = 'int32' })))
    -- strided logits (a transposed view) and random rows against the composition
    ember.manual_seed(3)
    local r = ember.randn(10, 37)
    local y = ember.randint(1, 11, { 37 })
    local want = r:t():argmax(2):eq(y):sum():item()
    assert.equals(want, F.count_correct(r:t(), y))
    assert.equals(want, F.count_correct(r:t():contiguous():double(), y))
    assert.equals(0, F.count_correct(ember.empty(0, 4), ember.empty(0, { dtype = 'int64' })))
    raises(function() F.count_correct(x, ember.tensor({3, 1, 4, 1}, I64)) end,
      'count_correct: target 4 at position 3 is out of range for 3 classes (expected 1..3)')
    raises(function() F.count_correct(x, ember.tensor({3, 1}, I64)) end,
      'count_correct: expected a target of shape [4] (one class per row of logits [4, 3]), got [2]')
    raises(function() F.count_correct(x[1], ember.tensor({3}, I64)) end,
      'count_correct: expected logits of shape [N, C], got [3]')
  end)

  it('compute mse and binary cross entropy with logits', function()
    local a, b = ember.tensor({1, 2, 3}, F64), ember.tensor({0, 2, 5}, F64)
    close(F.mse_loss(a, b), 5 / 3, 1e-12)
    close(F.mse_loss(a, b, { reduction = 'sum' }), 5, 1e-12)
    local z, y = ember.tensor({0, 2, -1}, F64), ember.tensor({1, 0, 1}, F64)
    local function bce(x, t) return math.max(x, 0) - x * t + math.log(1 + math.exp(-math.abs(x))) end
    close(F.binary_cross_entropy_with_logits(z, y), (bce(0, 1) + bce(2, 0) + bce(-1, 1)) / 3, 1e-12)
    close(F.binary_cross_entropy_with_logits(z, y, { pos_weight = ember.tensor({2, 2, 2}, F64), reduction = 'sum' }),
      2 * math.log(2) + (2 + math.log(1 + math.exp(-2))) + 2 * (1 + math.log(1 + math.exp(-1))), 1e-12)
  end)
end)
