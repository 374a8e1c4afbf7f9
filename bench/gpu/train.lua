-- bench/gpu/train.lua: Fashion-MNIST training steps on a GPU, ember's side (PyTorch's is
-- bench/gpu/torch_bench.py train). The models are those of pipelines/fashion_mnist_<m>.yaml,
-- built from the files' model: lists; SGD with momentum 0.9, lr 0.05, batch 128, as there.
-- Data: one synthetic batch of the same shape ([B, 1, 28, 28] float32, labels 1..10) kept on
-- the device, so the step time is the model's alone (both sides do the same).
-- A step is zero_grad, forward, cross_entropy, backward, optimizer step. `warmup` untimed
-- steps, then `steps` timed ones, each with the device synchronised before and after;
-- prints the median, the 10th and 90th percentiles (ms) and samples/s of the median.
--
--   build-gpu/ember bench/gpu/train.lua --model mlp [--steps 200] [--warmup 20] [--device cuda]
--   build/ember bench/gpu/train.lua --model cnn --device cpu --small    # a quick check on a CPU
local script_dir = debug.getinfo(1, 'S').source:match('^@(.*/)') or './'
local B = dofile(script_dir .. 'common.lua')

B.run('train', function()
  local o = B.options('train.lua', arg, { model = 'mlp', device = 'cuda', steps = 200, warmup = 20, batch = 128,
    seed = 0, small = false })
  if o.model ~= 'mlp' and o.model ~= 'cnn' then error("train.lua: --model must be mlp or cnn, got " .. o.model, 0) end
  if o.small then o.steps, o.warmup, o.batch = math.min(o.steps, 5), math.min(o.warmup, 2), math.min(o.batch, 16) end
  B.check_device(o.device)
  local pipeline = require 'ember.pipeline'
  local model_spec = require 'ember.pipeline.model'
  local root = script_dir .. '../../'
  local cfg = pipeline.load(root .. 'pipelines/fashion_mnist_' .. o.model .. '.yaml')
  ember.manual_seed(o.seed)
  local model = model_spec.build(cfg.model)
  if o.device ~= 'cpu' then model:to(o.device) end
  model:train()
  local opt = ember.optim.SGD(model:parameters(), { lr = cfg.optim.lr, momentum = cfg.optim.momentum })
  local F = ember.nn.functional
  local x = ember.randn(o.batch, 1, 28, 28, { device = o.device })
  local y = ember.randint(1, 11, { o.batch }, { device = o.device })
  local last_loss
  local function step()
    opt:zero_grad()
    local loss = F.cross_entropy(model(x), y)
    loss:backward()
    opt:step()
    last_loss = loss
  end
  local times = B.time(o.device, o.warmup, o.steps, step)
  table.sort(times)
  local median = B.median(times)
  local loss = last_loss:item()
  if loss ~= loss then error('train.lua: the loss is NaN', 0) end
  return {
    device = o.device, gpu = B.device_name(o.device), model = o.model, batch = o.batch, steps = o.steps,
    warmup = o.warmup, median_ms = median, p10_ms = times[math.max(1, math.floor(0.1 * #times))],
    p90_ms = times[math.max(1, math.ceil(0.9 * #times))], samples_per_s = o.batch / (median / 1e3),
    final_loss = loss, small = o.small or nil,
  }
end)
