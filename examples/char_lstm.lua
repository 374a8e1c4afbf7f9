-- examples/char_lstm.lua: char-rnn written by hand: the fortune cookies Debian ships
-- (package fortunes) as characters, a 2 x 128 LSTM (pipelines/models/char_lstm.lua), RMSprop
-- 2e-3 with gradients clamped to [-5, 5], sequences of 50 in batches of 50; the validation
-- loss on the held-out last tenth, a checkpoint and the tokenizer in --dir, then a sample.
--
--   build/ember examples/char_lstm.lua                          # 2000 steps
--   build/ember examples/char_lstm.lua --steps 50 --hidden 32   # a quick look (the tests' size)
--   build/ember examples/sample.lua runs/examples/char_lstm/model.safetensors --prompt 'The '
--
-- Options: --steps N, --batch-size N, --seq N, --hidden N, --layers N, --lr X, --seed N,
-- --eval-every N, --val-blocks N (held-out blocks per evaluation), --dir DIR.
local ember = require 'ember'
local nn, optim = ember.nn, ember.optim

local opt = require('ember.util.cli').options(arg, { steps = 2000, batch_size = 50, seq = 50, hidden = 128,
  layers = 2, lr = 2e-3, seed = 0, eval_every = 500, val_blocks = 200, dir = 'runs/examples/char_lstm' })

local here = arg[0]:match('^(.*)/[^/]*$') or '.'
dofile(here .. '/common/char_lm.lua') {
  opt = opt, block = opt.seq, val_batch = 100,
  model_file = 'pipelines/models/char_lstm.lua',
  args = function(vocab_size) return { vocab_size = vocab_size, hidden = opt.hidden, layers = opt.layers } end,
  optimizer = function(model)
    local rms = optim.RMSprop(model:parameters(), { lr = opt.lr, alpha = 0.95 })
    return rms, function()
      nn.utils.clip_grad_value_(model:parameters(), 5)   -- char-rnn's clamp to [-5, 5]
      rms:step()
    end
  end,
}
