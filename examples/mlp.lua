-- examples/mlp.lua: a 3-layer MLP on Fashion-MNIST: the model here, the training script in
-- examples/common/fashion_mnist.lua (a data loader, the loop with a cosine schedule, a
-- checkpoint every epoch, and the test accuracy of the model read back from that checkpoint).
--
--   build/ember examples/mlp.lua                          # 10 epochs, 89.3% test accuracy
--   build/ember examples/mlp.lua --epochs 1 --limit 2000  # a quick look (the test suite's size)
--   build/ember examples/mlp.lua --resume                 # continue an interrupted run
--   python3 examples/load_in_pytorch.py runs/examples/mlp # the checkpoint in PyTorch
--
-- Options: --epochs N, --limit N (training images), --test-limit N, --batch-size N, --lr X,
-- --seed N, --dir DIR (checkpoints), --resume, --stop-after N (end after epoch N as if the run
-- had been interrupted; --resume then finishes it with the same numbers as an unbroken run).
local ember = require 'ember'
local nn = ember.nn

local function make_model()
  return nn.Sequential {
    nn.Flatten(),              -- [N, 1, 28, 28] -> [N, 784]
    nn.Linear(784, 256), nn.ReLU(),
    nn.Linear(256, 128), nn.ReLU(),
    nn.Linear(128, 10),
  }
end

local here = arg[0]:match('^(.*)/[^/]*$') or '.'
dofile(here .. '/common/fashion_mnist.lua')('mlp', make_model)
