-- examples/cnn.lua: a small convolutional network on Fashion-MNIST, as a module class of your
-- own (the layers are named fields, so the checkpoint has the names a PyTorch class with the same
-- fields has); the training script is examples/common/fashion_mnist.lua (a data loader, the
-- loop, a checkpoint every epoch, and the test accuracy of the model read back from it).
--
--   build/ember examples/cnn.lua                          # 10 epochs, 92.6% test accuracy (minutes)
--   build/ember examples/cnn.lua --epochs 1 --limit 2000  # a quick look (the test suite's size)
--   build/ember examples/cnn.lua --resume                 # continue an interrupted run
--   python3 examples/load_in_pytorch.py runs/examples/cnn # the checkpoint in PyTorch
--
-- Options: --epochs N, --limit N (training images), --test-limit N, --batch-size N, --lr X,
-- --seed N, --dir DIR (checkpoints), --resume, --stop-after N (end after epoch N as if the run
-- had been interrupted; --resume then finishes it with the same numbers as an unbroken run).
local ember = require 'ember'
local nn, F = ember.nn, ember.nn.functional

local Net = nn.Module:extend('FashionCNN')
function Net:init()
  self.conv1 = nn.Conv2d(1, 32, 3, { padding = 1 })    -- [N, 32, 28, 28], pooled to 14x14
  self.conv2 = nn.Conv2d(32, 64, 3, { padding = 1 })   -- [N, 64, 14, 14], pooled to 7x7
  self.fc1 = nn.Linear(64 * 7 * 7, 128)
  self.fc2 = nn.Linear(128, 10)
end
function Net:forward(x)
  x = F.max_pool2d(self.conv1(x):relu(), 2)
  x = F.max_pool2d(self.conv2(x):relu(), 2)
  return self.fc2(self.fc1(x:flatten(2)):relu())       -- flatten dims 2.. (1-based)
end

local here = arg[0]:match('^(.*)/[^/]*$') or '.'
dofile(here .. '/common/fashion_mnist.lua')('cnn', function() return Net() end)
