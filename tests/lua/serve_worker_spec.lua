-- ember.serve.worker's warm-up: one forward of zeros per batch size before serving (the
-- kernels' per-shape plans made at start), and a model that refuses zeros is left unwarmed
-- rather than refused.
local worker = require 'ember.serve.worker'

describe('serve worker warm_up', function()
  local function spec(max_batch, dtype)
    return { name = 'm', inputs = { { name = 'x', dtype = dtype or 'float32', shape = { 4 } } },
      outputs = { { name = 'y', dtype = 'float32' } }, batching = { max_batch_size = max_batch } }
  end

  it('runs every batch size up to 64, then doubling, then max_batch_size', function()
    local seen = {}
    local lin = ember.nn.Linear(4, 3)
    local model = function(x)
      seen[#seen + 1] = x.shape[1]
      return lin(x)
    end
    assert.are.equal(8, worker.warm_up(model, spec(8)))
    assert.are.same({ 1, 2, 3, 4, 5, 6, 7, 8 }, seen)
    seen = {}
    assert.are.equal(67, worker.warm_up(model, spec(300)))
    assert.are.same({ 62, 63, 64, 128, 256, 300 }, { unpack(seen, 62) })
    for _, n in ipairs(seen) do assert.is_true(n >= 1 and n <= 300) end
  end)

  it('stops at the first forward that fails, without raising', function()
    local calls = 0
    local model = function(x)
      calls = calls + 1
      if x.shape[1] == 3 then error('no zeros here') end
      return x
    end
    assert.are.equal(2, worker.warm_up(model, spec(16)))
    assert.are.equal(3, calls)
  end)
end)
