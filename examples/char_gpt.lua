-- examples/char_gpt.lua: nanoGPT's character model written by hand: the fortune cookies
-- Debian ships (package fortunes) as characters, 4 pre-norm transformer blocks of 4 heads,
-- 128 wide, over blocks of 64 (pipelines/models/char_gpt.lua), AdamW with weight decay on
-- matrices only, a warm-up then a cosine decay, gradient norm clipped to 1, batches of 12;
-- the validation loss on the held-out last tenth, a checkpoint and the tokenizer in --dir.
--
--   build/ember examples/char_gpt.lua                                   # 2000 steps
--   build/ember examples/char_gpt.lua --steps 50 --embed 32 --layers 1  # the tests' size
--   build/ember examples/sample.lua runs/examples/char_gpt/model.safetensors --top_k 10
--
-- Options: --steps N, --batch-size N, --block N, --embed N, --layers N, --heads N, --lr X,
-- --min-lr X, --warmup N, --seed N, --eval-every N, --val-blocks N, --dir DIR.
local ember = require 'ember'
local nn, optim = ember.nn, ember.optim

local opt = require('ember.util.cli').options(arg, { steps = 2000, batch_size = 12, block = 64, embed = 128,
  layers = 4, heads = 4, lr = 1e-3, min_lr = 1e-4, warmup = 100, seed = 0, eval_every = 500, val_blocks = 240,
  dir = 'runs/examples/char_gpt' })

local here = arg[0]:match('^(.*)/[^/]*$') or '.'
dofile(here .. '/common/char_lm.lua') {
  opt = opt, block = opt.block, val_batch = 48,
  model_file = 'pipelines/models/char_gpt.lua',
  args = function(vocab_size)
    return { vocab_size = vocab_size, block = opt.block, layers = opt.layers, heads = opt.heads, embed = opt.embed,
      dropout = 0 }
  end,
  optimizer = function(model)
    -- weight decay on matrices only; a warm-up, then a cosine decay to min_lr
    local adamw = optim.AdamW(optim.weight_decay_groups(model, 0.1), { lr = opt.lr, betas = { 0.9, 0.99 } })
    local sched = optim.lr_scheduler.WarmupCosineLR(adamw, { warmup_steps = opt.warmup, total_steps = opt.steps,
      min_lr = opt.min_lr })
    return adamw, function()
      nn.utils.clip_grad_norm_(model:parameters(), 1.0)
      adamw:step()
      sched:step()
    end
  end,
}
