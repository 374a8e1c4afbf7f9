-- examples/common/fashion_mnist.lua: the training script examples/mlp.lua and examples/cnn.lua
-- share, written as you would write it by hand: options, the data, the loop with a cosine
-- schedule, a checkpoint every epoch (model and optimizer), --resume, and the test accuracy of
-- the model read back from its checkpoint. It returns run(name, make_model): the example names
-- itself (the checkpoint's "model" and the default --dir) and says how to build its network.
--
-- Options: --epochs N, --limit N (training images), --test-limit N, --batch-size N, --lr X,
-- --seed N, --dir DIR (checkpoints), --resume, --stop-after N (end after epoch N as if the run
-- had been interrupted; --resume then finishes it with the same numbers as an unbroken run).
local ember = require 'ember'
local F, data = ember.nn.functional, ember.data

return function(name, make_model)
  local opt = require('ember.util.cli').options(arg, { epochs = 10, limit = 0, test_limit = 0, batch_size = 128,
    lr = 0.05, seed = 0, dir = 'runs/examples/' .. name, resume = false, stop_after = 0 })
  ember.manual_seed(opt.seed)

  -- ---------------------------------------------------------------- data
  -- Debian's dataset-fashion-mnist; pixels scaled to (x / 255 - mean) / std as they are gathered.
  local norm = { mean = 0.2860, std = 0.3530 }
  local train_set = data.datasets.FashionMNIST { train = true, normalise = norm,
    limit = opt.limit > 0 and opt.limit or nil }
  local test_set = data.datasets.FashionMNIST { train = false, normalise = norm,
    limit = opt.test_limit > 0 and opt.test_limit or nil }
  local train = data.DataLoader { dataset = train_set, batch_size = opt.batch_size, shuffle = true, seed = opt.seed,
    drop_last = true }
  local test = data.DataLoader { dataset = test_set, batch_size = 1000 }

  -- ---------------------------------------------------------------- optimizer, schedule
  local model = make_model()
  local sgd = ember.optim.SGD(model:parameters(), { lr = opt.lr, momentum = 0.9 })
  local steps = opt.epochs * train:num_batches()
  local schedule = ember.optim.lr_scheduler.CosineAnnealingLR(sgd, { T_max = steps })   -- stepped per batch

  -- Test accuracy: the fraction of test images whose largest logit is the right class.
  local function evaluate(m)
    m:eval()
    local correct, seen = 0, 0
    ember.no_grad(function()
      for batch in test:epoch(1) do
        correct = correct + F.count_correct(m(batch.x), batch.y)
        seen = seen + batch.y.shape[1]
      end
    end)
    m:train()
    return correct / seen
  end

  -- ---------------------------------------------------------------- checkpoints
  -- DIR/model.safetensors holds the weights under PyTorch's names (load_in_pytorch.py reads it);
  -- DIR/optim.safetensors the optimizer's momentum buffers, the schedule and the epoch. Both are
  -- written atomically, model last, so a crash leaves the previous epoch's pair loadable.
  os.execute('mkdir -p ' .. opt.dir)
  local model_path, optim_path = opt.dir .. '/model.safetensors', opt.dir .. '/optim.safetensors'

  local function save_checkpoint(epoch, accuracy)
    local tensors, meta = sgd:state_dict()
    meta.epoch, meta.schedule_step = tostring(epoch), tostring(schedule.last_epoch)
    ember.save(optim_path, tensors, { metadata = meta })
    ember.save(model_path, model:state_dict(), { metadata = { model = name, epoch = tostring(epoch),
      test_accuracy = string.format('%.17g', accuracy), test_limit = tostring(opt.test_limit),
      normalise_mean = tostring(norm.mean), normalise_std = tostring(norm.std) } })
  end

  local first = 1
  if opt.resume then
    local weights, meta = ember.load(model_path)
    local state, optim_meta = ember.load(optim_path)
    model:load_state_dict(weights)
    sgd:load_state_dict(state, optim_meta)
    schedule:load_state_dict { last_epoch = tonumber(optim_meta.schedule_step) }
    first = tonumber(meta.epoch) + 1
    print(string.format('resumed from %s (epoch %d)', model_path, first - 1))
  end

  -- ---------------------------------------------------------------- training
  local now = function() return ember.C.em_clock_monotonic() end   -- seconds (the C API)
  print(string.format('Fashion-MNIST %s: %d training images, %d test images, %d batches of %d per epoch',
    name:upper(), train_set:size(), test_set:size(), train:num_batches(), opt.batch_size))
  local accuracy = 0 / 0
  for epoch = first, opt.epochs do
    local t0, loss_sum, batches = now(), 0, 0
    for batch in train:epoch(epoch) do
      local loss = F.cross_entropy(model(batch.x), batch.y)
      sgd:zero_grad()
      loss:backward()
      sgd:step()
      schedule:step()
      loss_sum, batches = loss_sum + loss:item(), batches + 1
    end
    local seconds = now() - t0
    accuracy = evaluate(model)
    save_checkpoint(epoch, accuracy)
    print(string.format('epoch %d  loss %.4f  test accuracy %.4f  %.0f samples/s', epoch, loss_sum / batches,
      accuracy, batches * opt.batch_size / seconds))
    if epoch == opt.stop_after then
      print(string.format('stopped after epoch %d: --resume continues from %s', epoch, model_path))
      os.exit(0)
    end
  end

  -- ---------------------------------------------------------------- the checkpoint, read back
  local fresh = make_model()
  local weights, meta = ember.load(model_path)
  fresh:load_state_dict(weights)
  local reloaded = evaluate(fresh)
  print(string.format('reloaded %s (epoch %s): test accuracy %.4f', model_path, meta.epoch, reloaded))
  assert(accuracy ~= accuracy or reloaded == accuracy, 'the reloaded model disagrees with the trained one')
  print(string.format('test accuracy: %.4f', reloaded))
end
