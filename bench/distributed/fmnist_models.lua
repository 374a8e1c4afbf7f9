-- bench/distributed/fmnist_models.lua - the Fashion-MNIST MLP and CNN of
-- pipelines/fashion_mnist_*.yaml, as the DDP benchmarks build them (seeded, so that every rank
-- starts from the same weights):  local build = dofile('bench/distributed/fmnist_models.lua')
local nn = ember.nn
return function(name)
  ember.manual_seed(0)
  if name == 'mlp' then
    return nn.Sequential{ nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10) }
  elseif name == 'cnn' then
    return nn.Sequential{ nn.Conv2d(1, 32, 3, {padding = 1}), nn.ReLU(), nn.MaxPool2d(2),
      nn.Conv2d(32, 64, 3, {padding = 1}), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
      nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10) }
  end
  error('fmnist_models.lua: unknown model ' .. tostring(name) .. ' (mlp or cnn)')
end
